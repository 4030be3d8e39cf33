//! How the log keeps values (store format 2): packed as the event window
//! packs them ([`Packed`]: zstd, most against a dictionary made of the
//! family's own values), the dictionaries in a table of their own. A
//! Work of one ConfigMap, about 1.8 KiB of JSON, takes 150–450 bytes of
//! log instead: the one writer inserts, commits and syncs that much less
//! per write, and values need no second compression (the caller packed
//! them for the window already).
//!
//! Each dictionary is written in the transaction of the first row packed
//! against it, so no committed row names a dictionary the file lacks.
//! Rows written before format 2 are plain (packing 0).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;
use rusqlite::{Connection, Row, params};

use crate::packed::{Dictionary, Packed, Packing, unpack_stored};
use crate::{Result, StoreError};

/// The `packing` column: how a row's value is packed.
const PLAIN: i64 = 0;
const ZSTD: i64 = 1;
const DICT: i64 = 2;

/// A row's value as the log keeps it.
pub(super) struct StoredValue {
    bytes: Vec<u8>,
    packing: i64,
    dictionary: Option<i64>,
}

impl StoredValue {
    /// The value at column `at`, its packing at `at + 1` and its
    /// dictionary at `at + 2`.
    pub(super) fn read(r: &Row<'_>, at: usize) -> rusqlite::Result<StoredValue> {
        Ok(StoredValue {
            bytes: r.get(at)?,
            packing: r.get(at + 1)?,
            dictionary: r.get(at + 2)?,
        })
    }
}

/// The columns (value, packing, dictionary) that keep a value: packed as
/// `packed`, or `plain` as it is.
pub(super) fn columns<'a>(
    packed: Option<&'a Packed>,
    plain: &'a [u8],
) -> (&'a [u8], i64, Option<i64>) {
    match packed.map(Packed::stored) {
        None | Some((_, Packing::Plain)) => (plain, PLAIN, None),
        Some((bytes, Packing::Zstd)) => (bytes, ZSTD, None),
        Some((bytes, Packing::Dict(id))) => (bytes, DICT, Some(id)),
    }
}

/// The dictionaries of a store's log, by id: loaded at open, and each new
/// one added as the writer first packs a row against it (before the row
/// is committed, so before any reader can see the row).
#[derive(Default)]
pub(super) struct LogDictionaries {
    by_id: RwLock<HashMap<i64, Arc<Dictionary>>>,
}

impl LogDictionaries {
    /// Every dictionary the log holds.
    pub(super) fn load(conn: &Connection) -> Result<LogDictionaries> {
        let mut stmt = conn.prepare("SELECT id, family, made_at, content FROM dictionaries")?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, u32>(2)?,
                r.get::<_, Vec<u8>>(3)?,
            ))
        })?;
        let mut by_id = HashMap::new();
        for row in rows {
            let (id, family, made_at, content) = row?;
            let dictionary = Dictionary::new(&family, made_at, &content)
                .filter(|d| d.id() == id)
                .ok_or_else(|| damaged(&format!("dictionary {id} does not match its content")))?;
            by_id.insert(id, dictionary);
        }
        Ok(LogDictionaries {
            by_id: RwLock::new(by_id),
        })
    }

    /// The dictionary made last of each family: what the event window
    /// packs with after a restart ([`crate::packed::Dictionaries::seed`]).
    pub(super) fn newest_of_each_family(&self) -> Vec<Arc<Dictionary>> {
        let mut newest: HashMap<&str, &Arc<Dictionary>> = HashMap::new();
        let by_id = self.by_id.read();
        for d in by_id.values() {
            let slot = newest.entry(d.family()).or_insert(d);
            // Ties (the same family made twice at one threshold, by two
            // runs) go to the higher id: the same choice on every open.
            if (d.made_at(), d.id()) > (slot.made_at(), slot.id()) {
                *slot = d;
            }
        }
        newest.into_values().cloned().collect()
    }

    pub(super) fn remember(&self, dictionary: &Arc<Dictionary>) {
        self.by_id
            .write()
            .entry(dictionary.id())
            .or_insert_with(|| dictionary.clone());
    }

    pub(super) fn ids(&self) -> HashSet<i64> {
        self.by_id.read().keys().copied().collect()
    }

    /// The value a row keeps.
    pub(super) fn value(&self, stored: StoredValue) -> Result<Bytes> {
        let packing = match (stored.packing, stored.dictionary) {
            (PLAIN, _) => return Ok(Bytes::from(stored.bytes)),
            (ZSTD, _) => Packing::Zstd,
            (DICT, Some(id)) => Packing::Dict(id),
            (packing, dictionary) => {
                return Err(damaged(&format!(
                    "a value is packed in an unknown way ({packing}, dictionary {dictionary:?})"
                )));
            }
        };
        let dictionary = match packing {
            Packing::Dict(id) => Some(self.by_id.read().get(&id).cloned().ok_or_else(|| {
                damaged(&format!("a value names dictionary {id}, which it lacks"))
            })?),
            Packing::Plain | Packing::Zstd => None,
        };
        unpack_stored(&stored.bytes, packing, dictionary.as_deref())
            .ok_or_else(|| damaged("a value does not decompress"))
    }
}

/// Writes `dictionary` to the log in `conn`'s transaction unless it is
/// there already.
pub(super) fn insert_dictionary(conn: &Connection, dictionary: &Dictionary) -> Result<()> {
    conn.prepare_cached(
        "INSERT OR IGNORE INTO dictionaries (id, family, made_at, content) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        dictionary.id(),
        dictionary.family(),
        dictionary.made_at(),
        dictionary.content()
    ])?;
    Ok(())
}

fn damaged(what: &str) -> StoreError {
    StoreError::Incompatible(format!("the store's log is damaged: {what}"))
}
