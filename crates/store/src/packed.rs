//! Values held compressed in memory: zstd at its fastest level, with one
//! compression context per thread. Used wherever a process keeps many
//! JSON objects for a long time (the watch cache, controllers' caches).
//!
//! Objects of one kind are alike: same keys, same labels, same managed
//! fields. Alone, a 1.8 KiB Work compresses to about 660 bytes; against a
//! few other Works as a dictionary, to about 140. [`Dictionaries`] makes
//! one per family of values (a resource type) once the family is large
//! enough to repay it.
//!
//! The embedded store's log keeps values as they are packed here
//! ([`Packed::stored`], [`unpack_stored`]) and each dictionary beside
//! them, named by a digest of its content ([`Dictionary::id`]).

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
/// The largest value unpacked: larger lengths are damage (the API server
/// takes no object near this size).
const UNPACK_AT_MOST: usize = 256 * 1024 * 1024;
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
    id: i64,
    family: Box<str>,
    made_at: u32,
    content: Box<[u8]>,
    compress: CDict<'static>,
    decompress: DDict<'static>,
}

impl std::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dictionary")
    }
}

impl Dictionary {
    /// The dictionary of `content`, made for `family` once it had seen
    /// `made_at` values.
    pub fn new(family: &str, made_at: u32, content: &[u8]) -> Option<Arc<Dictionary>> {
        Some(Arc::new(Dictionary {
            id: content_id(content),
            family: family.into(),
            made_at,
            content: content.into(),
            compress: CDict::try_create(content, LEVEL)?,
            decompress: DDict::try_create(content)?,
        }))
    }

    /// Names the dictionary wherever it is kept: the first 63 bits of the
    /// SHA-256 of its content, never 0. The same content always gets the
    /// same id, in any process.
    pub fn id(&self) -> i64 {
        self.id
    }

    pub fn family(&self) -> &str {
        &self.family
    }

    /// How many values its family had seen when it was made.
    pub fn made_at(&self) -> u32 {
        self.made_at
    }

    pub fn content(&self) -> &[u8] {
        &self.content
    }
}

fn content_id(content: &[u8]) -> i64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(content);
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let id = (u64::from_le_bytes(first) >> 1) as i64;
    id.max(1)
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
            if let Some(d) = Dictionary::new(family, f.seen, &content) {
                f.dictionary = Some(d);
            }
            if f.seen == last {
                f.samples = Vec::new();
            }
        }
        f.dictionary.clone()
    }

    /// Takes up `dictionary` (one kept from an earlier run) for its
    /// family, as if the family had seen as many values as when it was
    /// made: the family's values pack against it at once, and it is made
    /// again only at the thresholds still ahead. A family that has seen as
    /// many already keeps its own.
    pub fn seed(&self, dictionary: Arc<Dictionary>) {
        let mut families = self.families.lock();
        let f = families.entry(dictionary.family.clone()).or_default();
        if f.seen < dictionary.made_at {
            f.seen = dictionary.made_at;
            f.samples.clear();
            f.dictionary = Some(dictionary);
        }
    }
}

/// How a packed value is laid out where it is kept: as it is, a zstd frame,
/// or a zstd frame against a dictionary (by its id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packing {
    Plain,
    Zstd,
    Dict(i64),
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
        if value.len() < COMPRESS_FROM || value.len() > UNPACK_AT_MOST {
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
        match self.try_unpack() {
            Some(v) => v,
            // Only a bug could get here: `pack` made it.
            None => {
                error!("packed value does not decompress");
                Bytes::new()
            }
        }
    }

    /// The value, or `None` if its bytes are not a frame this packing
    /// makes (bytes read from a damaged file).
    pub fn try_unpack(&self) -> Option<Bytes> {
        match self {
            Packed::Plain(b) => Some(Bytes::copy_from_slice(b)),
            Packed::Zstd(b) => unpack_frame(b, None),
            Packed::Dict(d, b) => unpack_frame(b, Some(&d.decompress)),
        }
    }

    /// The bytes to keep and how they are packed.
    pub fn stored(&self) -> (&[u8], Packing) {
        match self {
            Packed::Plain(b) => (b, Packing::Plain),
            Packed::Zstd(b) => (b, Packing::Zstd),
            Packed::Dict(d, b) => (b, Packing::Dict(d.id)),
        }
    }

    /// The bytes held (compressed or not).
    pub fn held_len(&self) -> usize {
        match self {
            Packed::Plain(b) | Packed::Zstd(b) | Packed::Dict(_, b) => b.len(),
        }
    }
}

/// The value of bytes kept as [`Packed::stored`] gave them, unpacked where
/// they lie (not copied into a [`Packed`] first), with the dictionary
/// their packing names; `None` if that is not the dictionary given or the
/// bytes do not unpack.
pub fn unpack_stored(
    bytes: &[u8],
    packing: Packing,
    dictionary: Option<&Dictionary>,
) -> Option<Bytes> {
    match (packing, dictionary) {
        (Packing::Plain, _) => Some(Bytes::copy_from_slice(bytes)),
        (Packing::Zstd, _) => unpack_frame(bytes, None),
        (Packing::Dict(id), Some(d)) if d.id == id => unpack_frame(bytes, Some(&d.decompress)),
        (Packing::Dict(_), _) => None,
    }
}

/// Decompresses a packed value's bytes: the uncompressed length (4 bytes,
/// little-endian), then a zstd frame.
fn unpack_frame(b: &[u8], dictionary: Option<&DDict<'static>>) -> Option<Bytes> {
    let (len, frame) = b.split_at(4.min(b.len()));
    let len = len.try_into().map(u32::from_le_bytes).ok()? as usize;
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        let mut fresh;
        let d = match d.as_mut() {
            Some(d) => d,
            None => {
                fresh = DCtx::try_create()?;
                &mut fresh
            }
        };
        // The length is the packer's word: a damaged one must not make a
        // huge allocation. Values this large are never packed.
        if len > UNPACK_AT_MOST {
            return None;
        }
        let mut out = Vec::with_capacity(len);
        let done = match dictionary {
            Some(dict) => d.decompress_using_ddict(&mut out, frame, dict),
            None => d.decompress(&mut out, frame),
        };
        done.ok().filter(|&n| n == len).map(|_| Bytes::from(out))
    })
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

    /// Bytes read back from where packed values are kept round-trip, and
    /// damaged ones (truncated, flipped, a huge length) unpack to nothing
    /// rather than to something else or a panic.
    #[test]
    fn kept_values_round_trip_and_damaged_ones_unpack_to_nothing() {
        let dictionaries = Dictionaries::default();
        let mut d = None;
        for i in 0..64 {
            d = dictionaries.pick("/works/", &work(i));
        }
        let d = d.expect("a dictionary at the 64th value");
        for packed in [
            Packed::pack(&work(7)),
            Packed::pack_with(&work(7), Some(d.clone())),
        ] {
            let (bytes, packing) = packed.stored();
            let back = unpack_stored(bytes, packing, Some(&d));
            assert_eq!(back.unwrap(), work(7));
            let mut damaged = bytes.to_vec();
            for cut in [0, 3, 4, damaged.len() / 2] {
                let p = unpack_stored(&damaged[..cut], packing, Some(&d));
                assert!(p.is_none(), "cut at {cut}");
            }
            damaged[..4].copy_from_slice(&u32::MAX.to_le_bytes());
            let p = unpack_stored(&damaged, packing, Some(&d));
            assert!(p.is_none(), "a huge length");
            let last = damaged.len() - 1;
            damaged[..4].copy_from_slice(&(work(7).len() as u32).to_le_bytes());
            damaged[last] ^= 0xff;
            let p = unpack_stored(&damaged, packing, Some(&d));
            assert_ne!(p, Some(work(7)), "a flipped byte");
        }
        let other = Dictionary::new("/works/", 64, b"another content").unwrap();
        let packed = Packed::pack_with(&work(7), Some(d));
        let (bytes, packing) = packed.stored();
        assert!(unpack_stored(bytes, packing, Some(&other)).is_none());
    }
}
