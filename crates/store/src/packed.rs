//! Values held compressed in memory: zstd at its fastest level, with one
//! compression context per thread. Used wherever a process keeps many
//! JSON objects for a long time (the watch cache, controllers' caches).

use std::cell::RefCell;

use bytes::Bytes;
use tracing::error;

/// Values shorter than this are kept as they are.
const COMPRESS_FROM: usize = 128;
/// zstd's fastest level: most of the gain, a few microseconds per object.
const LEVEL: i32 = 1;

thread_local! {
    /// One context of each kind per thread, reused across values: creating
    /// one costs more than compressing a small object.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        RefCell::new(zstd::bulk::Compressor::new(LEVEL).ok());
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        RefCell::new(zstd::bulk::Decompressor::new().ok());
}

/// A value as the cache holds it.
#[derive(Clone, Debug)]
pub enum Packed {
    Plain(Bytes),
    /// The uncompressed length (4 bytes, little-endian), then a zstd frame.
    Zstd(Bytes),
}

impl Packed {
    pub fn pack(value: &Bytes) -> Packed {
        if value.len() < COMPRESS_FROM || value.len() > u32::MAX as usize {
            return Packed::Plain(value.clone());
        }
        let frame = COMPRESSOR.with(|c| {
            let mut c = c.borrow_mut();
            let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(value.len()));
            c.as_mut()?.compress_to_buffer(value, &mut frame).ok()?;
            Some(frame)
        });
        match frame {
            Some(frame) if frame.len() + 4 < value.len() => {
                // Exactly sized: the cache keeps it for the value's lifetime.
                let mut packed = Vec::with_capacity(4 + frame.len());
                packed.extend_from_slice(&(value.len() as u32).to_le_bytes());
                packed.extend_from_slice(&frame);
                Packed::Zstd(Bytes::from(packed))
            }
            _ => Packed::Plain(value.clone()),
        }
    }

    pub fn unpack(&self) -> Bytes {
        match self {
            Packed::Plain(b) => b.clone(),
            Packed::Zstd(b) => {
                let (len, frame) = b.split_at(4.min(b.len()));
                let len = len.try_into().map(u32::from_le_bytes).unwrap_or(0) as usize;
                let decompressed = DECOMPRESSOR.with(|d| match d.borrow_mut().as_mut() {
                    Some(d) => d.decompress(frame, len),
                    None => zstd::bulk::decompress(frame, len),
                });
                match decompressed {
                    Ok(v) => Bytes::from(v),
                    // Only a bug could get here: `pack` made it.
                    Err(error) => {
                        error!(%error, "packed value does not decompress");
                        Bytes::new()
                    }
                }
            }
        }
    }
}

impl Packed {
    /// The bytes held (compressed or not).
    pub fn held_len(&self) -> usize {
        match self {
            Packed::Plain(b) | Packed::Zstd(b) => b.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_values_are_compressed_and_small_ones_kept() {
        let json: String = (0..50)
            .map(|i| format!(r#"{{"name":"container-{i}","image":"nginx"}},"#))
            .collect();
        let value = Bytes::from(json);
        let packed = Packed::pack(&value);
        let Packed::Zstd(stored) = &packed else {
            panic!("a repetitive 2 KiB value should be compressed");
        };
        assert!(stored.len() < value.len() / 4);
        assert_eq!(packed.unpack(), value);
        let small = Bytes::from_static(b"{\"kind\":\"Lease\"}");
        assert!(matches!(Packed::pack(&small), Packed::Plain(_)));
        assert_eq!(Packed::pack(&small).unpack(), small);
    }
}
