//! A ROS 2 bag file in SQLite storage (`.db3`: rosbag2's `sqlite3` plugin, the default
//! storage of ROS 2 Foxy to Humble) read as a log, through the read-only SQLite reader of
//! [`super::sqlite`].
//!
//! A bag file holds a `topics` table (`id`, `name`, `type`, `serialization_format`, ...)
//! and a `messages` table (`id`, `topic_id`, `timestamp`, `data`): each row one serialized
//! message and its receive time in ns, which is what an MCAP bag's log time holds. Columns
//! are found by name, so every rosbag2 schema version reads (Jazzy's extra tables and
//! columns are ignored). A topic is a channel (schema name = the message type, encoding =
//! the serialization format, `cdr`); the messages table's leaf pages, in row order, are
//! cut into blocks of about [`BLOCK_BYTES`] of payload, each with its time span and topics,
//! which the reader merges in log-time order like MCAP chunks.
//!
//! A recorder in write-ahead-log mode (rosbag2's `resilient` preset) that died leaves its
//! last transactions in `<file>-wal`: the reader passes its bytes and the committed ones
//! are read as SQLite recovers them ([`Db::apply_wal`]); what follows the last commit is
//! an issue.
//!
//! Message compression (`ros2 bag record --compression-mode message`) is undone by the
//! reader for every storage (`reader::message_bytes`). Damage never panics: a bad
//! page of the messages table is an issue and its rows are skipped; a bad schema or topics
//! table is an error (nothing could be attributed to a topic).
//!
//! Cost at open: one read per page of the B-tree's interior and leaf pages (not the
//! overflow pages that hold most of an image), to learn each block's time span. Per block
//! read: its leaf pages, and the overflow pages of the wanted messages only.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::PathBuf;

use super::limits::ReadLimits;
use super::reader::{push_raw, Block, BlockKind, InChannel, LogReader, RawMsg, Source};
use super::sqlite::{Cell, Db, Record, SqliteError, Table, Value};
use super::{LogError, LogIssueKind};

/// Payload bytes per block (about an MCAP chunk's).
const BLOCK_BYTES: u64 = 4 << 20;
/// Leaf pages per block at most (bounds a block of many small messages).
const BLOCK_LEAVES: usize = 1024;

/// The messages table of an open `.db3` file.
#[derive(Debug)]
pub(super) struct Db3 {
    db: Db,
    /// Leaf pages of the messages table, in row order.
    leaves: Vec<u32>,
    /// Columns of the messages table's records.
    topic_col: usize,
    time_col: usize,
    data_col: usize,
    /// `topics.id` → the log's channel id.
    topic_ids: BTreeMap<i64, u16>,
}

/// What opening a `.db3` file finds.
pub(super) struct Opened {
    pub(super) db3: Db3,
    pub(super) channels: BTreeMap<u16, InChannel>,
    pub(super) blocks: Vec<Block>,
    /// Problems found while indexing (damaged pages, odd rows); the file is still read.
    pub(super) issues: Vec<(LogIssueKind, String)>,
}

/// One message row as the open-time scan sees it.
struct RowHead {
    topic: i64,
    time: i64,
}

impl Db3 {
    /// Opens the bag file in `file` (`file_len` bytes) with, when the database is in
    /// write-ahead-log mode, its `-wal` file's bytes as `wal()` gives them (`None`: no such
    /// file): the transactions committed there are read as SQLite recovers them. Errors
    /// (with what is wrong) when it is not a SQLite database redline reads or has no ROS 2
    /// `topics` and `messages` tables.
    pub(super) fn open(
        file: &mut Source,
        file_len: u64,
        limits: &ReadLimits,
        wal: impl FnOnce() -> Option<Result<Vec<u8>, String>>,
    ) -> Result<Opened, String> {
        let mut db = Db::open(file, file_len).map_err(|e| e.to_string())?;
        let mut issues = Vec::new();
        if db.wal {
            match wal().map(|w| w.and_then(|w| db.apply_wal(&w))) {
                None => {}
                Some(Ok(applied)) if applied.unused_bytes > 0 => issues.push((
                    LogIssueKind::Truncated,
                    format!(
                        "the last {} bytes of its -wal file (a transaction the recorder never finished, or damage) are not read; its {} committed transactions are",
                        applied.unused_bytes, applied.commits
                    ),
                )),
                Some(Ok(_)) => {}
                Some(Err(e)) => issues.push((
                    LogIssueKind::Truncated,
                    format!("its -wal file cannot be read ({e}); the messages only it holds are missing"),
                )),
            }
        }
        let tables = db
            .tables(file, limits.max_record_bytes)
            .map_err(|e| format!("its schema cannot be read ({e})"))?;
        let find = |name: &str| tables.iter().find(|t| t.name.eq_ignore_ascii_case(name));
        let (Some(topics), Some(messages)) = (find("topics"), find("messages")) else {
            let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
            return Err(format!(
                "it is a SQLite database without the `topics` and `messages` tables of a ROS 2 bag (its tables: {})",
                if names.is_empty() { "none".to_string() } else { names.join(", ") }
            ));
        };
        let col = |t: &Table, name: &str| {
            t.column(name).ok_or_else(|| {
                format!(
                    "its {} table has no `{name}` column (columns: {}); not a ROS 2 bag redline reads",
                    t.name,
                    t.columns.join(", ")
                )
            })
        };
        for t in [topics, messages] {
            if t.without_rowid {
                return Err(format!(
                    "its {} table is WITHOUT ROWID, which ROS 2 never writes; redline does not read it",
                    t.name
                ));
            }
        }
        let channels_by_id = read_topics(&db, file, topics, limits, &mut issues, &col)?;
        let (topic_col, time_col, data_col) = (
            col(messages, "topic_id")?,
            col(messages, "timestamp")?,
            col(messages, "data")?,
        );
        let mut damage = Vec::new();
        let leaves_all = db.table_leaves(file, messages.root, &mut damage);
        for e in damage {
            issues.push((
                LogIssueKind::CorruptChunk,
                format!(
                    "the messages table's B-tree is damaged ({e}); the rows under it are skipped"
                ),
            ));
        }
        let mut topic_ids = BTreeMap::new();
        let mut channels = BTreeMap::new();
        for (id, ch) in channels_by_id {
            // Channel ids in topic order (at most 65536 topics: read_topics checked).
            let cid = channels.len() as u16;
            topic_ids.insert(id, cid);
            channels.insert(cid, ch);
        }
        let mut db3 = Db3 {
            db,
            leaves: Vec::new(),
            topic_col,
            time_col,
            data_col,
            topic_ids,
        };
        let blocks = db3.index(file, leaves_all, limits, &mut issues);
        Ok(Opened {
            db3,
            channels,
            blocks,
            issues,
        })
    }

    /// Scans the messages table's leaves (`all`, in row order) and cuts them into blocks;
    /// keeps the leaves that could be read.
    fn index(
        &mut self,
        file: &mut Source,
        all: Vec<u32>,
        limits: &ReadLimits,
        issues: &mut Vec<(LogIssueKind, String)>,
    ) -> Vec<Block> {
        let mut blocks = Vec::new();
        let mut cur: Option<(Block, u64)> = None;
        let mut page = Vec::new();
        let mut payload = Vec::new();
        let mut unknown_topics = BTreeSet::new();
        let (mut negative, mut bad) = (0u64, 0u64);
        let page_size = u64::from(self.db.page_size);
        for leaf in all {
            let mut rows = Vec::new();
            let read = self.db.read_leaf(file, leaf, &mut page).and_then(|()| {
                self.db.leaf_cells(leaf, &page, |c| {
                    rows.push((
                        self.row_head(file, leaf, &c, limits, &mut payload),
                        c.payload_len,
                    ));
                    Ok(())
                })
            });
            if let Err(e) = read {
                issues.push(damaged_leaf(leaf, &e));
                // The next block starts after the damage.
                blocks.extend(cur.take().map(|(b, _)| b));
                continue;
            }
            let li = self.leaves.len();
            self.leaves.push(leaf);
            let (b, bytes) = cur.get_or_insert_with(|| {
                (
                    Block {
                        part: 0,
                        offset: u64::from(leaf - 1) * page_size,
                        body_len: 0,
                        kind: BlockKind::Db3(li..li),
                        start_ns: u64::MAX,
                        end_ns: 0,
                        channels: Some(BTreeSet::new()),
                        skip: false,
                    },
                    0,
                )
            });
            if let BlockKind::Db3(r) = &mut b.kind {
                r.end = li + 1;
            }
            b.body_len += page_size;
            for (head, len) in rows {
                *bytes = bytes.saturating_add(len);
                let Some(RowHead { topic, time }) = head else {
                    bad += 1;
                    continue;
                };
                let Ok(t) = u64::try_from(time) else {
                    negative += 1;
                    continue;
                };
                let Some(&ch) = self.topic_ids.get(&topic) else {
                    unknown_topics.insert(topic);
                    continue;
                };
                b.start_ns = b.start_ns.min(t);
                b.end_ns = b.end_ns.max(t);
                if let Some(set) = &mut b.channels {
                    set.insert(ch);
                }
            }
            let leaves = match &b.kind {
                BlockKind::Db3(r) => r.len(),
                _ => 0,
            };
            if *bytes >= BLOCK_BYTES || leaves >= BLOCK_LEAVES {
                blocks.extend(cur.take().map(|(b, _)| b));
            }
        }
        blocks.extend(cur.take().map(|(b, _)| b));
        // A block of rows no channel reads is never loaded.
        blocks.retain(|b| b.channels.as_ref().is_some_and(|c| !c.is_empty()));
        if !unknown_topics.is_empty() {
            let ids: Vec<String> = unknown_topics.iter().take(8).map(i64::to_string).collect();
            issues.push((
                LogIssueKind::UnknownSchema,
                format!(
                    "rows of topic ids {} are not in the topics table; they are skipped",
                    ids.join(", ")
                ),
            ));
        }
        if negative > 0 {
            issues.push((
                LogIssueKind::UndecodableMessage,
                format!("{negative} rows have a negative timestamp; they are skipped"),
            ));
        }
        if bad > 0 {
            issues.push((
                LogIssueKind::UndecodableMessage,
                format!("{bad} rows have no integer topic_id and timestamp (or a broken record); they are skipped"),
            ));
        }
        blocks
    }

    /// The topic id and timestamp of a message row: from the bytes on its leaf page, or
    /// (when they lie past them: tiny pages) from its whole payload. `None` for a row
    /// whose record is broken or holds no integers there.
    fn row_head(
        &self,
        file: &mut Source,
        leaf: u32,
        cell: &Cell<'_>,
        limits: &ReadLimits,
        payload: &mut Vec<u8>,
    ) -> Option<RowHead> {
        let get = |rec: &Record<'_>| {
            Some(RowHead {
                topic: rec.value(self.topic_col)?.int()?,
                time: rec.value(self.time_col)?.int()?,
            })
        };
        if let Some(h) = Record::parse(cell.local).ok().as_ref().and_then(get) {
            return Some(h);
        }
        self.db
            .payload(file, leaf, cell, limits.max_record_bytes, payload)
            .ok()?;
        get(&Record::parse(payload).ok()?)
    }

    /// Reads the rows of the block of leaves `leaves` (indices into the kept leaves):
    /// `want(channel, log time)` says which to read whole; `take(channel, log time, data,
    /// index in the block)` gets each of those. Damage becomes `issues`.
    pub(super) fn read_block(
        &self,
        file: &mut Source,
        leaves: Range<usize>,
        limits: &ReadLimits,
        mut want: impl FnMut(u16, u64) -> bool,
        mut take: impl FnMut(u16, u64, &[u8], usize),
        issues: &mut Vec<(LogIssueKind, String)>,
    ) {
        let mut page = Vec::new();
        let mut payload = Vec::new();
        let mut idx = 0;
        for &leaf in self.leaves.get(leaves).unwrap_or_default() {
            // Each row is read where its cell lies on the leaf page (no copy of the page).
            let read = self.db.read_leaf(file, leaf, &mut page).and_then(|()| {
                self.db.leaf_cells(leaf, &page, |cell| {
                    idx += 1;
                    let Some(RowHead { topic, time }) =
                        self.row_head(file, leaf, &cell, limits, &mut payload)
                    else {
                        return Ok(());
                    };
                    let (Some(&ch), Ok(t)) = (self.topic_ids.get(&topic), u64::try_from(time))
                    else {
                        return Ok(());
                    };
                    if !want(ch, t) {
                        return Ok(());
                    }
                    let rowid = cell.rowid;
                    if let Err(e) =
                        self.db
                            .payload(file, leaf, &cell, limits.max_record_bytes, &mut payload)
                    {
                        let kind = if cell.payload_len > limits.max_record_bytes {
                            LogIssueKind::OverLimit
                        } else {
                            LogIssueKind::CorruptChunk
                        };
                        issues.push((kind, format!("message row {rowid} cannot be read ({e}; the limit is `max_record_bytes` in the config's [log] table); it is skipped")));
                        return Ok(());
                    }
                    let data = Record::parse(&payload)
                        .ok()
                        .and_then(|r| r.value(self.data_col))
                        .and_then(Value::bytes);
                    match data {
                        Some(data) => take(ch, t, data, idx),
                        None => issues.push((
                            LogIssueKind::UndecodableMessage,
                            format!("message row {rowid} has no data blob; it is skipped"),
                        )),
                    }
                    Ok(())
                })
            });
            if let Err(e) = read {
                issues.push(damaged_leaf(leaf, &e));
            }
        }
    }
}

impl LogReader {
    /// Indexes a `.db3` bag file (see `db3`): its topics are the channels, its message
    /// pages the blocks.
    pub(super) fn open_db3(&mut self) -> Result<(), LogError> {
        // The write-ahead log beside a file (never for a log held in memory).
        let wal_path = match &self.file {
            Source::File(_) => {
                let mut p = self.path.clone().into_os_string();
                p.push("-wal");
                Some(PathBuf::from(p))
            }
            // A compressed file (a closed bag file) or a log in memory has none.
            Source::Memory(_) | Source::Packed(_) => None,
        };
        let limit = self.limits.max_record_bytes;
        let read_wal = || {
            let path = wal_path?;
            let len = std::fs::metadata(&path).ok()?.len();
            Some(if len > limit {
                Err(format!(
                    "{len} bytes, over `max_record_bytes` ({limit}) in the config's [log] table"
                ))
            } else {
                std::fs::read(&path).map_err(|e| e.to_string())
            })
        };
        let opened =
            Db3::open(&mut self.file, self.file_len, &self.limits, read_wal).map_err(|why| {
                LogError::Db3 {
                    path: self.path.clone(),
                    why,
                }
            })?;
        self.channels = opened.channels;
        self.blocks = opened.blocks;
        self.db3 = Some(opened.db3);
        for (kind, detail) in opened.issues {
            self.issue(kind, detail);
        }
        self.range = (
            self.blocks.iter().map(|b| b.start_ns).min().unwrap_or(0),
            self.blocks.iter().map(|b| b.end_ns).max().unwrap_or(0),
        );
        self.indexed = true;
        Ok(())
    }

    /// [`LogReader::load_block`] for leaf pages `leaves` of a `.db3` file's messages table.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn load_db3_block(
        &mut self,
        b: &Block,
        leaves: std::ops::Range<usize>,
        ordinal: usize,
        wanted: &BTreeSet<u16>,
        start: u64,
        end: u64,
        out: &mut Vec<RawMsg>,
    ) {
        self.make_room_for(Some(b.part));
        let (file, channel_ids, db3) = match b.part {
            0 => (&mut self.file, None, self.db3.as_ref()),
            k => {
                let more = &mut self.more_files[k - 1];
                (&mut more.file, Some(&more.channel_ids), more.db3.as_ref())
            }
        };
        let Some(db3) = db3 else {
            return;
        };
        let log_channel = |ch: u16| match channel_ids {
            None => Some(ch),
            Some(ids) => ids.get(&ch).copied(),
        };
        let mut issues = Vec::new();
        let mut bad = Vec::new();
        let limits = self.limits;
        db3.read_block(
            file,
            leaves,
            &self.limits,
            |ch, t| log_channel(ch).is_some_and(|c| wanted.contains(&c)) && t >= start && t < end,
            |ch, t, data, idx| {
                if let Some(channel) = log_channel(ch) {
                    push_raw(out, &mut bad, (t, ordinal, idx), channel, data, &limits);
                }
            },
            &mut issues,
        );
        self.chunks_read += 1;
        let name = self.part_name(b.part);
        for (kind, detail) in issues {
            self.issue(kind, format!("{name}{detail}"));
        }
        for detail in bad {
            self.issue(LogIssueKind::UndecodableMessage, format!("{name}{detail}"));
        }
    }
}

/// The issue of a leaf page of the messages table that cannot be read.
fn damaged_leaf(leaf: u32, e: &SqliteError) -> (LogIssueKind, String) {
    (
        LogIssueKind::CorruptChunk,
        format!("page {leaf} of the messages table is damaged ({e}); its rows are skipped"),
    )
}

/// Reads the topics table: `id` (or the row id) → channel.
fn read_topics(
    db: &Db,
    file: &mut Source,
    topics: &Table,
    limits: &ReadLimits,
    issues: &mut Vec<(LogIssueKind, String)>,
    col: &dyn Fn(&Table, &str) -> Result<usize, String>,
) -> Result<BTreeMap<i64, InChannel>, String> {
    let name_col = col(topics, "name")?;
    let type_col = col(topics, "type")?;
    let format_col = col(topics, "serialization_format")?;
    let id_col = topics.column("id");
    let mut damage = Vec::new();
    let leaves = db.table_leaves(file, topics.root, &mut damage);
    if let Some(e) = damage.into_iter().next() {
        return Err(format!("its topics table is damaged ({e})"));
    }
    let mut out = BTreeMap::new();
    let mut page = Vec::new();
    let mut payload = Vec::new();
    for leaf in leaves {
        db.read_leaf(file, leaf, &mut page)
            .map_err(|e| format!("its topics table is damaged ({e})"))?;
        let mut cells = Vec::new();
        db.leaf_cells(leaf, &page, |c| {
            cells.push(c);
            Ok(())
        })
        .map_err(|e| format!("its topics table is damaged ({e})"))?;
        for cell in cells {
            db.payload(file, leaf, &cell, limits.max_record_bytes, &mut payload)
                .map_err(|e| format!("its topics table is damaged ({e})"))?;
            let rec = Record::parse(&payload)
                .map_err(|e| format!("its topics table is damaged (row {}: {e})", cell.rowid))?;
            // `id INTEGER PRIMARY KEY` (as rosbag2 declares it) is the row id, stored as NULL.
            let id = match id_col.filter(|&i| Some(i) != topics.rowid_alias) {
                Some(i) => rec.value(i).and_then(Value::int).unwrap_or(cell.rowid),
                None => cell.rowid,
            };
            let text = |i: usize| rec.value(i).and_then(Value::text).unwrap_or_default();
            let ch = InChannel {
                topic: text(name_col),
                schema: text(type_col),
                encoding: text(format_col),
            };
            if out.len() > usize::from(u16::MAX) {
                issues.push((
                    LogIssueKind::OverLimit,
                    format!("topic {} is over the 65536 topics a log can have; its messages are skipped", ch.topic),
                ));
                continue;
            }
            out.insert(id, ch);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    /// Builds a bag-shaped database with Python's `sqlite3` (the reference implementation):
    /// rows of 0 B to 150 KB (on the leaf page, spilling by a byte, long overflow chains),
    /// deletes and later inserts (freeblocks, reused pages), a topic id the topics table
    /// lacks; prints the rows it holds. `None` (skipped loudly) without python3.
    fn python_db(path: &std::path::Path, page_size: u32) -> Option<Vec<(i64, i64, i64, usize)>> {
        let script = r#"
import random, sqlite3, sys
path, page = sys.argv[1], int(sys.argv[2])
db = sqlite3.connect(path)
db.execute(f"PRAGMA page_size={page}")
db.executescript("CREATE TABLE topics(id INTEGER PRIMARY KEY,name TEXT NOT NULL,type TEXT NOT NULL,"
  "serialization_format TEXT NOT NULL,offered_qos_profiles TEXT NOT NULL, type_description_hash TEXT);"
  "CREATE TABLE messages(id INTEGER PRIMARY KEY,topic_id INTEGER NOT NULL,timestamp INTEGER NOT NULL,"
  " data BLOB NOT NULL);")
for t in (1, 2, 5):
    db.execute("INSERT INTO topics VALUES (?,?,?,?,?,?)", (t, f"/t{t}", "std_msgs/msg/String", "cdr", "", ""))
rng = random.Random(page)
def data(rowid, n):
    return bytes((rowid * 31 + i) % 251 for i in range(n))
def insert(k):
    for _ in range(k):
        n = rng.choice([0, 1, 100, page - 36, page - 35, page - 34, page, 3 * page + 7, rng.randrange(150000)])
        cur = db.execute("INSERT INTO messages (topic_id, timestamp, data) VALUES (?,?,?)",
                         (rng.choice([1, 2, 5, 9]), rng.randrange(1 << 62), b""))
        rid = cur.lastrowid
        db.execute("UPDATE messages SET data=? WHERE id=?", (data(rid, n), rid))
insert(120)
db.execute("DELETE FROM messages WHERE id % 7 = 3")
insert(40)
db.commit()
for r in db.execute("SELECT id, topic_id, timestamp, length(data) FROM messages ORDER BY id"):
    print(*r)
"#;
        let out = match std::process::Command::new("python3")
            .args(["-c", script])
            .arg(path)
            .arg(page_size.to_string())
            .output()
        {
            Ok(o) if o.status.success() => o,
            r => {
                eprintln!("\n==== SKIPPED: db3 rows against python3's sqlite3: {r:?} ====\n");
                return None;
            }
        };
        Some(
            String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .map(|l| {
                    let v: Vec<i64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
                    (v[0], v[1], v[2], v[3] as usize)
                })
                .collect(),
        )
    }

    #[test]
    fn every_row_reads_as_pythons_sqlite3_stored_it() {
        for page_size in [512, 4096, 65536] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("rows.db3");
            let Some(rows) = python_db(&path, page_size) else {
                return;
            };
            let len = std::fs::metadata(&path).unwrap().len();
            let mut file = Source::File(File::open(&path).unwrap());
            let opened = Db3::open(&mut file, len, &ReadLimits::default(), || None).unwrap();
            let topics: Vec<&str> = opened.channels.values().map(|c| c.topic.as_str()).collect();
            assert_eq!(topics, ["/t1", "/t2", "/t5"]);
            assert!(
                opened.issues.iter().any(|(_, d)| d.contains("topic ids 9")),
                "{:?}",
                opened.issues
            );
            let mut got = Vec::new();
            let mut issues = Vec::new();
            for b in &opened.blocks {
                let BlockKind::Db3(leaves) = &b.kind else {
                    panic!("{b:?}")
                };
                opened.db3.read_block(
                    &mut file,
                    leaves.clone(),
                    &ReadLimits::default(),
                    |_, _| true,
                    |ch, t, data, _| got.push((ch, t, data.to_vec())),
                    &mut issues,
                );
            }
            assert!(issues.is_empty(), "{issues:?}");
            let want: Vec<_> = rows.iter().filter(|r| r.1 != 9).collect();
            assert_eq!(got.len(), want.len(), "page size {page_size}");
            let channel = |t: i64| [1, 2, 5].iter().position(|&x| x == t).unwrap() as u16;
            for ((ch, t, data), &&(rowid, topic, time, n)) in got.iter().zip(&want) {
                assert_eq!(
                    (*ch, *t, data.len()),
                    (channel(topic), time as u64, n),
                    "row {rowid}"
                );
                let ok = data
                    .iter()
                    .enumerate()
                    .all(|(i, &x)| i64::from(x) == (rowid * 31 + i as i64) % 251);
                assert!(ok, "page size {page_size}: row {rowid}'s bytes");
            }
            // Blocks: their spans hold their rows' times.
            assert!(opened.blocks.iter().all(|b| b.start_ns <= b.end_ns));
        }
    }

    /// The fuzzer's first find (stop 53): a cell whose payload size is a 9-byte varint of
    /// -1 (read as 2^64 − 1 bytes) overflowed the open-time byte count. Every leaf of the
    /// messages table gets one such cell: the file opens, those rows are reported, nothing
    /// panics, and the blocks read.
    #[test]
    fn cells_of_absurd_payload_sizes_are_bad_rows_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.db3");
        let Some(_) = python_db(&path, 1024) else {
            return;
        };
        let mut bytes = std::fs::read(&path).unwrap();
        let mut patched = 0;
        // Pages 1 and 2 hold the schema and the topics table; from 3 on, the messages table.
        for n in 3..=bytes.len() / 1024 {
            let page = &mut bytes[(n - 1) * 1024..n * 1024];
            if page[0] != 0x0D || u16::from_be_bytes([page[3], page[4]]) == 0 {
                continue;
            }
            let cell = usize::from(u16::from_be_bytes([page[8], page[9]]));
            if cell + 9 <= 1024 {
                page[cell..cell + 9].fill(0xFF);
                patched += 1;
            }
        }
        assert!(patched > 3, "{patched}");
        let len = bytes.len() as u64;
        let mut file = Source::Memory(std::io::Cursor::new(bytes));
        let opened = Db3::open(&mut file, len, &ReadLimits::default(), || None).unwrap();
        assert!(!opened.issues.is_empty());
        let mut rows = 0;
        let mut issues = Vec::new();
        for b in &opened.blocks {
            if let BlockKind::Db3(leaves) = &b.kind {
                opened.db3.read_block(
                    &mut file,
                    leaves.clone(),
                    &ReadLimits::default(),
                    |_, _| true,
                    |_, _, _, _| rows += 1,
                    &mut issues,
                );
            }
        }
        assert!(rows > 0, "the intact rows still read");
    }
}
