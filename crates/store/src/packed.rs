//! Values held compressed in memory: zstd at its fastest level, with one
//! compression context per thread. Used wherever a process keeps many
//! JSON objects for a long time (the watch cache, controllers' caches).
//!
//! Objects of one kind are alike: same keys, same labels, same managed
//! fields. Alone, a 1.8 KiB Work compresses to about 660 bytes; against a
//! few other Works as a dictionary, to about 140. [`Dictionaries`] makes
//! one per family of values (a resource type) once the family is large
//! enough to repay it.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tracing::error;
use zstd::zstd_safe::{CDict, DCtx, DDict};

/// Values shorter than this are kept as they are.
const COMPRESS_FROM: usize = 128;
/// zstd's fastest level: most of the gain, a few microseconds per object.
const LEVEL: i32 = 1;
/// The value counts of a family at which its dictionary is made: first
/// once the family is large enough to repay one (a dictionary costs tens
/// of KiB), then again from newer values. A family's first values are
/// often younger versions than its later ones (a Work before it has a
/// status): against a dictionary of those, a Work with a status packs to
/// 430 bytes; against one of later Works, to 150.
const DICTIONARY_AT: [u32; 3] = [64, 1_024, 16_384];
/// The most recent values of a family its dictionary is made of.
const SAMPLES: usize = 4;
/// Larger values are not taken as samples.
const SAMPLE_MAX: usize = 16 * 1024;

thread_local! {
    /// One context of each kind per thread, reused across values: creating
    /// one costs more than compressing a small object.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        RefCell::new(zstd::bulk::Compressor::new(LEVEL).ok());
    static DECOMPRESSOR: RefCell<Option<DCtx<'static>>> = RefCell::new(DCtx::try_create());
}

/// A raw-content dictionary: earlier values of the same family.
pub struct Dictionary {
    compress: CDict<'static>,
    decompress: DDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dictionary")
    }
}

impl Dictionary {
    fn new(content: &[u8]) -> Option<Arc<Dictionary>> {
        Some(Arc::new(Dictionary {
            compress: CDict::try_create(content, LEVEL)?,
            decompress: DDict::try_create(content)?,
        }))
    }
}

#[derive(Default)]
struct Family {
    seen: u32,
    /// The most recent values, until the dictionary is made the last time.
    samples: Vec<Bytes>,
    dictionary: Option<Arc<Dictionary>>,
}

/// A dictionary per family of values, made from the family's own recent
/// values at each of [`DICTIONARY_AT`]. Values packed before keep the
/// dictionary they were packed with.
#[derive(Default)]
pub struct Dictionaries {
    families: Mutex<HashMap<Box<str>, Family>>,
}

impl Dictionaries {
    /// The dictionary to pack `value` of `family` with, if the family has
    /// one (now).
    pub fn pick(&self, family: &str, value: &Bytes) -> Option<Arc<Dictionary>> {
        if value.len() < COMPRESS_FROM {
            return None;
        }
        let last = DICTIONARY_AT[DICTIONARY_AT.len() - 1];
        let mut families = self.families.lock();
        // Looked up before inserting: no key allocated on every value.
        if !families.contains_key(family) {
            families.insert(family.into(), Family::default());
        }
        let f = families.get_mut(family)?;
        if f.seen >= last {
            return f.dictionary.clone();
        }
        f.seen += 1;
        if value.len() <= SAMPLE_MAX {
            if f.samples.len() == SAMPLES {
                f.samples.remove(0);
            }
            f.samples.push(value.clone());
        }
        if DICTIONARY_AT.contains(&f.seen) {
            let content: Vec<u8> = f.samples.concat();
            if let Some(d) = Dictionary::new(&content) {
                f.dictionary = Some(d);
            }
            if f.seen == last {
                f.samples = Vec::new();
            }
        }
        f.dictionary.clone()
    }
}

/// A value as a cache holds it: one exactly sized allocation, shared by
/// clones (a `Bytes` would be twice the size inline, and allocate a
/// header of its own on its first clone).
#[derive(Clone, Debug)]
pub enum Packed {
    Plain(Arc<[u8]>),
    /// The uncompressed length (4 bytes, little-endian), then a zstd frame.
    Zstd(Arc<[u8]>),
    /// As `Zstd`, compressed against the dictionary.
    Dict(Arc<Dictionary>, Arc<[u8]>),
}

impl Packed {
    pub fn pack(value: &Bytes) -> Packed {
        Packed::pack_with(value, None)
    }

    /// Packs `value`, against `dictionary` if given.
    pub fn pack_with(value: &Bytes, dictionary: Option<Arc<Dictionary>>) -> Packed {
        if value.len() < COMPRESS_FROM || value.len() > u32::MAX as usize {
            return Packed::Plain(Arc::from(&value[..]));
        }
        let frame = COMPRESSOR.with(|c| {
            let mut c = c.borrow_mut();
            let c = c.as_mut()?;
            let mut frame = Vec::with_capacity(zstd::zstd_safe::compress_bound(value.len()));
            match &dictionary {
                Some(d) => {
                    c.context_mut()
                        .compress_using_cdict(&mut frame, value, &d.compress)
                        .ok()?;
                }
                None => {
                    c.compress_to_buffer(value, &mut frame).ok()?;
                }
            }
            Some(frame)
        });
        match frame {
            Some(frame) if frame.len() + 4 < value.len() => {
                // Exactly sized: the cache keeps it for the value's lifetime.
                let packed: Arc<[u8]> = (value.len() as u32)
                    .to_le_bytes()
                    .iter()
                    .chain(&frame)
                    .copied()
                    .collect();
                match dictionary {
                    Some(d) => Packed::Dict(d, packed),
                    None => Packed::Zstd(packed),
                }
            }
            _ => Packed::Plain(Arc::from(&value[..])),
        }
    }

    /// Whether `other` is this very value (a clone of it), not another
    /// one that happens to hold the same bytes: a reader that memoises
    /// what it decoded tells by this that the object did not change.
    pub fn is_same(&self, other: &Packed) -> bool {
        let bytes = |p: &Packed| match p {
            Packed::Plain(b) | Packed::Zstd(b) | Packed::Dict(_, b) => b.clone(),
        };
        Arc::ptr_eq(&bytes(self), &bytes(other))
    }

    pub fn unpack(&self) -> Bytes {
        let (b, dictionary) = match self {
            Packed::Plain(b) => return Bytes::copy_from_slice(b),
            Packed::Zstd(b) => (b, None),
            Packed::Dict(d, b) => (b, Some(&d.decompress)),
        };
        let (len, frame) = b.split_at(4.min(b.len()));
        let len = len.try_into().map(u32::from_le_bytes).unwrap_or(0) as usize;
        let decompressed = DECOMPRESSOR.with(|d| {
            let mut d = d.borrow_mut();
            let mut fresh;
            let d = match d.as_mut() {
                Some(d) => d,
                None => {
                    fresh = DCtx::try_create()?;
                    &mut fresh
                }
            };
            let mut out = Vec::with_capacity(len);
            let done = match dictionary {
                Some(dict) => d.decompress_using_ddict(&mut out, frame, dict),
                None => d.decompress(&mut out, frame),
            };
            done.ok().map(|_| out)
        });
        match decompressed {
            Some(v) => Bytes::from(v),
            // Only a bug could get here: `pack` made it.
            None => {
                error!("packed value does not decompress");
                Bytes::new()
            }
        }
    }

    /// The bytes held (compressed or not).
    pub fn held_len(&self) -> usize {
        match self {
            Packed::Plain(b) | Packed::Zstd(b) | Packed::Dict(_, b) => b.len(),
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

    fn work(i: usize) -> Bytes {
        Bytes::from(format!(
            r#"{{"apiVersion":"work.karmada.io/v1alpha1","kind":"Work","metadata":{{"name":"t{i:06}-85775","namespace":"karmada-es-member{}","uid":"{:08x}-52de-4ae0-a5f6-5ed8ef50eddf","labels":{{"work.karmada.io/permanent-id":"{:08x}"}}}},"spec":{{"workload":{{"manifests":[{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"t{i:06}","namespace":"bench"}},"data":{{"index":"{i}"}}}}]}}}}}}"#,
            i % 10,
            i * 7919,
            i * 104729
        ))
    }

    #[test]
    fn a_large_family_gets_a_dictionary_that_packs_its_values_much_smaller() {
        let dictionaries = Dictionaries::default();
        let mut plain = 0;
        let mut with_dictionary = 0;
        for i in 0..200 {
            let value = work(i);
            let d = dictionaries.pick("/work.karmada.io/works/", &value);
            assert_eq!(d.is_some(), i + 1 >= DICTIONARY_AT[0] as usize, "value {i}");
            let packed = Packed::pack_with(&value, d);
            assert_eq!(packed.unpack(), value, "value {i} round-trips");
            if i >= 100 {
                plain += Packed::pack(&value).held_len();
                with_dictionary += packed.held_len();
                assert!(matches!(packed, Packed::Dict(..)));
            }
        }
        assert!(
            with_dictionary * 2 < plain,
            "with a dictionary {with_dictionary} bytes, without {plain}"
        );
        // Another family counts on its own.
        assert!(dictionaries.pick("/v1/configmaps/", &work(0)).is_none());
    }

    /// `work(i)` once it has a status, as it does after its first apply.
    fn applied_work(i: usize) -> Bytes {
        let w = String::from_utf8(work(i).to_vec()).unwrap();
        let status = format!(
            r#","status":{{"conditions":[{{"type":"Applied","status":"True","reason":"AppliedSuccessful","message":"Manifest has been successfully applied","lastTransitionTime":"2026-11-23T03:12:{:02}Z"}}],"manifestStatuses":[{{"identifier":{{"ordinal":0,"group":"","version":"v1","kind":"ConfigMap","resource":"configmaps","namespace":"bench","name":"t{i:06}"}},"health":"Healthy"}}]}}}}"#,
            i % 60
        );
        Bytes::from(format!("{}{status}", &w[..w.len() - 1]))
    }

    #[test]
    fn a_family_that_grows_up_gets_a_dictionary_of_its_later_values() {
        let dictionaries = Dictionaries::default();
        let family = "/work.karmada.io/works/";
        // The first values are young (no status yet); every later one has one.
        let mut first = Vec::new();
        for i in 0..DICTIONARY_AT[0] as usize {
            let value = work(i);
            let d = dictionaries.pick(family, &value);
            first.push((value.clone(), Packed::pack_with(&value, d)));
        }
        let early = dictionaries.pick(family, &applied_work(100)).unwrap();
        let mut renewed = None;
        for i in 101..3_000 {
            renewed = dictionaries.pick(family, &applied_work(i));
        }
        let renewed = renewed.unwrap();
        assert!(
            !Arc::ptr_eq(&early, &renewed),
            "the dictionary was made again"
        );
        let size = |d: &Arc<Dictionary>| -> usize {
            (5_000..5_100)
                .map(|i| Packed::pack_with(&applied_work(i), Some(d.clone())).held_len())
                .sum()
        };
        let (with_early, with_renewed) = (size(&early), size(&renewed));
        assert!(
            with_renewed * 3 < with_early * 2,
            "grown values: {with_renewed} bytes against the renewed dictionary, {with_early} against the first"
        );
        // Values packed against an older dictionary still read back.
        for (value, packed) in first {
            assert_eq!(packed.unpack(), value);
        }
        let late = applied_work(7_000);
        assert_eq!(Packed::pack_with(&late, Some(renewed)).unpack(), late);
    }
}
