//! The underlay socket with the kernel's UDP offloads: sealed datagrams
//! leave in batches of equal-sized segments handed over in one
//! `sendmsg` (UDP GSO, `UDP_SEGMENT`), and arrive coalesced, several
//! datagrams of one sender per `recvmsg` (UDP GRO). One system call then
//! moves up to 64 KiB where it moved one packet, which is where a
//! userspace tunnel's time goes (the crypto is a small part).
//!
//! Where the kernel or the route refuses segmentation offload, the
//! socket falls back to one datagram per call, for good.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::socket::{
    ControlMessage, ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, sendmsg, setsockopt,
    sockopt,
};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tracing::debug;

/// The most segments the kernel takes in one GSO send (`UDP_MAX_SEGMENTS`
/// on the kernels that allow fewest).
const MAX_SEGMENTS: usize = 64;
/// The underlay socket's send and receive buffers, as wireguard-go asks.
const SOCKET_BUFFER: usize = 7 << 20;
/// The most UDP payload one IPv4 datagram carries.
const MAX_PAYLOAD: usize = 65_507;

/// Datagrams to one address, each `segment` bytes but the last, which may
/// be shorter: what one GSO send carries.
#[derive(Default)]
pub struct Batch {
    buf: Vec<u8>,
    segment: usize,
    count: usize,
    to: Option<SocketAddr>,
    /// A shorter datagram was added: nothing may follow it.
    closed: bool,
}

impl Batch {
    /// Adds `datagram` for `to` if it can join this send; false when the
    /// batch must be sent first.
    pub fn push(&mut self, datagram: &[u8], to: SocketAddr) -> bool {
        if self.count == 0 {
            self.buf.clear();
            self.buf.extend_from_slice(datagram);
            self.segment = datagram.len();
            self.count = 1;
            self.to = Some(to);
            self.closed = false;
            return true;
        }
        let fits = self.to == Some(to)
            && !self.closed
            && datagram.len() <= self.segment
            && self.count < MAX_SEGMENTS
            && self.buf.len() + datagram.len() <= MAX_PAYLOAD;
        if !fits {
            return false;
        }
        self.buf.extend_from_slice(datagram);
        self.count += 1;
        self.closed = datagram.len() < self.segment;
        true
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The datagrams, one slice each.
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        let sent = if self.count == 0 {
            &[][..]
        } else {
            &self.buf[..]
        };
        sent.chunks(self.segment.max(1))
    }
}

/// One receive: `len` bytes from `from`, datagrams of `segment` bytes
/// each (the last may be shorter).
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub len: usize,
    pub segment: usize,
    pub from: SocketAddr,
}

/// The underlay socket, with GSO and GRO where the kernel has them.
pub struct Underlay {
    socket: UdpSocket,
    gso: AtomicBool,
}

impl Underlay {
    /// Wraps `socket` and asks for GRO (a kernel without it delivers one
    /// datagram per receive, which [`Underlay::recv`] handles alike).
    pub fn new(socket: UdpSocket) -> Underlay {
        if let Err(error) = setsockopt(&socket, sockopt::UdpGroSegment, &true) {
            debug!(%error, "no UDP GRO on the underlay socket");
        }
        // A burst of 64 KiB sends must not overflow the default buffers
        // (a datagram dropped there is a TCP retransmission inside the
        // tunnel). Above the sysctl limits where allowed (root, as the
        // gateway runs), within them otherwise.
        let (rcv, snd) = (
            setsockopt(&socket, sockopt::RcvBufForce, &SOCKET_BUFFER)
                .or_else(|_| setsockopt(&socket, sockopt::RcvBuf, &SOCKET_BUFFER)),
            setsockopt(&socket, sockopt::SndBufForce, &SOCKET_BUFFER)
                .or_else(|_| setsockopt(&socket, sockopt::SndBuf, &SOCKET_BUFFER)),
        );
        if let Err(error) = rcv.and(snd) {
            debug!(%error, "the underlay socket keeps its default buffers");
        }
        Underlay {
            socket,
            gso: AtomicBool::new(true),
        }
    }

    /// Sends one datagram.
    pub async fn send_to(&self, datagram: &[u8], to: SocketAddr) -> io::Result<usize> {
        self.socket.send_to(datagram, to).await
    }

    /// Sends the batch (one system call where GSO works) and empties it.
    pub async fn flush(&self, batch: &mut Batch) -> io::Result<()> {
        let Some(to) = batch.to else {
            return Ok(());
        };
        if batch.count == 0 {
            return Ok(());
        }
        let result = if batch.count > 1 && self.gso.load(Ordering::Relaxed) {
            match self.send_segments(&batch.buf, batch.segment, to).await {
                Err(e) if gso_refused(&e) => {
                    debug!(error = %e, "no UDP GSO on the underlay: one datagram per send");
                    self.gso.store(false, Ordering::Relaxed);
                    self.send_each(batch, to).await
                }
                other => other,
            }
        } else {
            self.send_each(batch, to).await
        };
        batch.count = 0;
        batch.to = None;
        result
    }

    async fn send_each(&self, batch: &Batch, to: SocketAddr) -> io::Result<()> {
        for d in batch.datagrams() {
            self.socket.send_to(d, to).await?;
        }
        Ok(())
    }

    async fn send_segments(&self, buf: &[u8], segment: usize, to: SocketAddr) -> io::Result<()> {
        let segment = u16::try_from(segment)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))?;
        let addr = SockaddrStorage::from(to);
        let fd = self.socket.as_raw_fd();
        self.socket
            .async_io(Interest::WRITABLE, || {
                sendmsg(
                    fd,
                    &[IoSlice::new(buf)],
                    &[ControlMessage::UdpGsoSegments(&segment)],
                    MsgFlags::empty(),
                    Some(&addr),
                )
                .map(drop)
                .map_err(io::Error::from)
            })
            .await
    }

    /// Receives what the kernel holds for one sender: one datagram, or
    /// several coalesced by GRO.
    pub async fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        self.socket
            .async_io(Interest::READABLE, || receive(self.socket.as_raw_fd(), buf))
            .await
    }

    /// As [`Underlay::recv`], or `WouldBlock` when nothing is waiting.
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        self.socket
            .try_io(Interest::READABLE, || receive(self.socket.as_raw_fd(), buf))
    }
}

fn receive(fd: std::os::fd::RawFd, buf: &mut [u8]) -> io::Result<Received> {
    let mut control = nix::cmsg_space!(i32);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut control), MsgFlags::empty())
        .map_err(io::Error::from)?;
    let len = msg.bytes;
    let mut segment = len;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::UdpGroSegments(size) = c
                && let Ok(size) = usize::try_from(size)
                && size > 0
            {
                segment = size;
            }
        }
    }
    let from = msg
        .address
        .and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::from((v4.ip(), v4.port())))
                .or_else(|| {
                    a.as_sockaddr_in6()
                        .map(|v6| SocketAddr::from((v6.ip(), v6.port())))
                })
        })
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a datagram with no sender"))?;
    Ok(Received {
        len,
        segment: segment.max(1),
        from,
    })
}

/// The errors of a kernel, device or route that cannot segment.
fn gso_refused(e: &io::Error) -> bool {
    use nix::errno::Errno;
    matches!(
        e.raw_os_error().map(Errno::from_raw),
        Some(Errno::EIO | Errno::EINVAL | Errno::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn a_batch_takes_equal_segments_then_one_shorter() {
        let mut b = Batch::default();
        assert!(b.push(&[1; 100], addr(1)));
        assert!(b.push(&[2; 100], addr(1)));
        assert!(!b.push(&[3; 100], addr(2)), "another address");
        assert!(!b.push(&[3; 101], addr(1)), "a longer datagram");
        assert!(b.push(&[3; 40], addr(1)));
        assert!(!b.push(&[4; 40], addr(1)), "nothing after a shorter one");
        let sizes: Vec<usize> = b.datagrams().map(<[u8]>::len).collect();
        assert_eq!(sizes, vec![100, 100, 40]);
    }

    #[test]
    fn a_batch_stays_within_one_datagram_and_the_segment_limit() {
        let mut b = Batch::default();
        let mut n = 0;
        while b.push(&[0; 1456], addr(1)) {
            n += 1;
        }
        assert_eq!(n, MAX_PAYLOAD / 1456);
        let mut b = Batch::default();
        let mut n = 0;
        while b.push(&[0; 10], addr(1)) {
            n += 1;
        }
        assert_eq!(n, MAX_SEGMENTS);
    }

    /// A batch sent in one call arrives as the same datagrams, whether
    /// the kernel coalesces them (GRO) or not.
    #[tokio::test]
    async fn segments_arrive_as_the_datagrams_sent() {
        let rx = Underlay::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let tx = Underlay::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
        let to = rx.socket.local_addr().unwrap();
        let mut b = Batch::default();
        let sent: Vec<Vec<u8>> = (0..10u8)
            .map(|i| vec![i; if i == 9 { 300 } else { 1200 }])
            .collect();
        for d in &sent {
            assert!(b.push(d, to));
        }
        tx.flush(&mut b).await.unwrap();
        assert!(b.is_empty());
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while got.len() < sent.len() {
            let r = tokio::time::timeout(std::time::Duration::from_secs(5), rx.recv(&mut buf))
                .await
                .expect("the datagrams arrive")
                .unwrap();
            assert_eq!(r.from, tx.socket.local_addr().unwrap());
            got.extend(buf[..r.len].chunks(r.segment).map(<[u8]>::to_vec));
        }
        assert_eq!(got, sent);
    }
}
