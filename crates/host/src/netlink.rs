//! The hot path of the netns runtime, without a process per step: a pod's
//! namespace made and removed with system calls, its veth, addresses and
//! routes made over rtnetlink. `ip` spawned three times per pod was most of
//! a pod's start in a burst; what stays with `ip` (nodes, gateways) is made
//! once per node.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::path::Path;

use futures::TryStreamExt;
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use rtnetlink::packet_route::link::{InfoData, InfoVeth};
use rtnetlink::packet_route::route::RouteScope;
use rtnetlink::{Handle, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::{NETNS_DIR, netns_path};

/// Makes a named network namespace as `ip netns add` does: a thread
/// unshares its network namespace and bind-mounts it at
/// `/run/netns/NAME`. Fails if the name is taken; leaves nothing on
/// failure.
pub async fn add_netns(name: &str) -> io::Result<()> {
    let path = netns_path(name);
    std::fs::create_dir_all(NETNS_DIR)?;
    tokio::task::spawn_blocking(move || {
        // A thread of its own: the unshare changes the calling thread's
        // namespace, which must not be one of the runtime's.
        std::thread::spawn(move || {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            let made = nix::sched::unshare(CloneFlags::CLONE_NEWNET).and_then(|()| {
                nix::mount::mount(
                    Some(Path::new("/proc/thread-self/ns/net")),
                    &path,
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
            });
            if let Err(e) = made {
                let _ = std::fs::remove_file(&path);
                return Err(io::Error::from(e));
            }
            Ok(())
        })
        .join()
        .map_err(|_| io::Error::other("the namespace thread panicked"))?
    })
    .await
    .map_err(io::Error::other)?
}

/// Removes a named network namespace as `ip netns del` does (the
/// namespace itself goes when its last process and link go).
pub fn delete_netns(name: &str) -> io::Result<()> {
    let path = netns_path(name);
    match nix::mount::umount2(&path, MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL) => {}
        Err(nix::errno::Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The processes in a named namespace, as `ip netns pids` finds them:
/// those whose `/proc/PID/ns/net` is the same namespace.
pub fn pids_in(name: &str) -> Vec<i32> {
    use std::os::unix::fs::MetadataExt;
    let Ok(target) = std::fs::metadata(netns_path(name)) else {
        return Vec::new();
    };
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.filter_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/net")).ok()?;
        (ns.dev() == target.dev() && ns.ino() == target.ino()).then_some(pid)
    })
    .collect()
}

/// An rtnetlink connection inside a named network namespace: its socket
/// is opened by a thread that entered the namespace, and stays there.
pub struct Netlink {
    handle: Handle,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for Netlink {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

fn no_link(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no link {name}"))
}

fn failed(what: &str, e: rtnetlink::Error) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl Netlink {
    pub async fn open(netns: &str) -> io::Result<Netlink> {
        let runtime = tokio::runtime::Handle::current();
        let (connection, handle) = crate::in_netns(netns, move || {
            // The socket registers with the runtime's reactor.
            let _entered = runtime.enter();
            let (connection, handle, _) = rtnetlink::new_connection()?;
            Ok((connection, handle))
        })
        .await?;
        Ok(Netlink {
            handle,
            connection: tokio::spawn(connection),
        })
    }

    /// The index of link `name`.
    pub async fn index(&self, name: &str) -> io::Result<u32> {
        let mut links = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute();
        match links.try_next().await {
            Ok(Some(link)) => Ok(link.header.index),
            Ok(None) => Err(no_link(name)),
            // The kernel answers a name it does not know with ENODEV.
            Err(rtnetlink::Error::NetlinkError(m))
                if m.raw_code() == -(nix::errno::Errno::ENODEV as i32) =>
            {
                Err(no_link(name))
            }
            Err(e) => Err(failed(&format!("cannot find link {name}"), e)),
        }
    }

    /// A veth pair: `name` here, `peer` in the namespace `peer_netns`
    /// (an open handle of it).
    pub async fn add_veth(
        &self,
        name: &str,
        peer: &str,
        peer_netns: &std::fs::File,
    ) -> io::Result<()> {
        let peer_msg = LinkUnspec::new_with_name(peer)
            .setns_by_fd(peer_netns.as_raw_fd())
            .build();
        let msg = LinkVeth::new(name, peer)
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer_msg)))
            .build();
        self.handle
            .link()
            .add(msg)
            .execute()
            .await
            .map_err(|e| failed(&format!("cannot add veth {name}"), e))
    }

    /// Deletes link `name`; one already gone is not an error.
    pub async fn delete_link(&self, name: &str) -> io::Result<()> {
        let index = match self.index(name).await {
            Ok(i) => i,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        self.handle
            .link()
            .del(index)
            .execute()
            .await
            .map_err(|e| failed(&format!("cannot delete link {name}"), e))
    }

    pub async fn set_up(&self, index: u32) -> io::Result<()> {
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(|e| failed("cannot set a link up", e))
    }

    pub async fn add_address(&self, index: u32, ip: Ipv4Addr, prefix: u8) -> io::Result<()> {
        self.handle
            .address()
            .add(index, IpAddr::V4(ip), prefix)
            .execute()
            .await
            .map_err(|e| failed(&format!("cannot add address {ip}/{prefix}"), e))
    }

    /// A route to `dst/prefix` out of link `index`, through `gateway` or
    /// (without one) on the link itself.
    pub async fn add_route(
        &self,
        dst: Ipv4Addr,
        prefix: u8,
        index: u32,
        gateway: Option<Ipv4Addr>,
    ) -> io::Result<()> {
        let mut route = RouteMessageBuilder::<Ipv4Addr>::new()
            .destination_prefix(dst, prefix)
            .output_interface(index);
        route = match gateway {
            Some(gw) => route.gateway(gw),
            None => route.scope(RouteScope::Link),
        };
        self.handle
            .route()
            .add(route.build())
            .execute()
            .await
            .map_err(|e| failed(&format!("cannot add the route to {dst}/{prefix}"), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// A namespace made and removed here is one `ip` sees, with the veth,
    /// addresses and routes made over netlink.
    #[tokio::test]
    async fn a_namespace_with_a_veth_and_routes() {
        if !root() || crate::which("ip").is_none() {
            eprintln!("skipped: needs root and iproute2");
            return;
        }
        let suffix = std::process::id();
        let (a, b) = (
            format!("flt-nltest-a{suffix}"),
            format!("flt-nltest-b{suffix}"),
        );
        add_netns(&a).await.unwrap();
        add_netns(&b).await.unwrap();
        assert!(add_netns(&a).await.is_err(), "a name taken is refused");
        let listed = crate::ip(&["netns", "list"]).await.unwrap();
        assert!(listed.contains(&a) && listed.contains(&b), "{listed}");

        let na = Netlink::open(&a).await.unwrap();
        let nb = Netlink::open(&b).await.unwrap();
        let b_file = std::fs::File::open(netns_path(&b)).unwrap();
        na.add_veth("va", "eth0", &b_file).await.unwrap();
        let va = na.index("va").await.unwrap();
        na.set_up(va).await.unwrap();
        na.add_address(va, Ipv4Addr::new(10, 9, 0, 1), 32)
            .await
            .unwrap();
        na.add_route(Ipv4Addr::new(10, 9, 0, 2), 32, va, None)
            .await
            .unwrap();
        let eth0 = nb.index("eth0").await.unwrap();
        nb.set_up(nb.index("lo").await.unwrap()).await.unwrap();
        nb.add_address(eth0, Ipv4Addr::new(10, 9, 0, 2), 32)
            .await
            .unwrap();
        nb.set_up(eth0).await.unwrap();
        nb.add_route(Ipv4Addr::new(10, 9, 0, 1), 32, eth0, None)
            .await
            .unwrap();
        nb.add_route(
            Ipv4Addr::UNSPECIFIED,
            0,
            eth0,
            Some(Ipv4Addr::new(10, 9, 0, 1)),
        )
        .await
        .unwrap();
        let routes = crate::ip(&["-n", &b, "route"]).await.unwrap();
        assert!(routes.contains("default via 10.9.0.1 dev eth0"), "{routes}");
        // Traffic crosses the pair.
        let listener = crate::in_netns(&a, || std::net::TcpListener::bind("10.9.0.1:0"))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        crate::connect_in(&b, addr, std::time::Duration::from_secs(2))
            .await
            .expect("a connection from b reaches a");
        drop(listener);

        // A process inside is found; removal leaves nothing.
        let mut sleeper = std::process::Command::new("ip")
            .args(["netns", "exec", &a, "sleep", "30"])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while pids_in(&a).is_empty() && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(!pids_in(&a).is_empty());
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        na.delete_link("va").await.unwrap();
        assert!(na.index("va").await.is_err(), "the veth is gone");
        na.delete_link("va")
            .await
            .expect("a link already gone is no error");
        drop((na, nb, b_file));
        delete_netns(&a).unwrap();
        delete_netns(&b).unwrap();
        delete_netns(&b).unwrap();
        let listed = crate::ip(&["netns", "list"]).await.unwrap();
        assert!(!listed.contains(&a) && !listed.contains(&b), "{listed}");
    }
}
