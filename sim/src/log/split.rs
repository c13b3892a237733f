//! A log split over several files (a ROS 2 bag directory, `bag_dir`): the files are opened
//! one by one as they are joined into one [`LogReader`] — channels matched by topic, schema
//! and encoding (a channel only a later file has gets a fresh id), blocks merged by start
//! time, issues prefixed with their file. A file with nothing readable in it is an
//! [`LogIssueKind::UnreadableFile`] issue and the others are read; the first file that opens
//! is the log's first (its calibration and static transforms serve the whole recording).
//! Cost: each file's own open (summary or scan), one at a time, so that the decompressed
//! copies of compressed files stay within their disk budget (`unpack`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::db3::Db3;
use super::reader::{LogReader, Source};
use super::{LogError, LogIssueKind, ReadLimits};

/// A further file of a log split over several (a ROS 2 bag directory): its own channel ids
/// are mapped to the log's.
#[derive(Debug)]
pub(super) struct MoreFile {
    pub(super) path: PathBuf,
    pub(super) file: Source,
    /// This file's channel id → the log's.
    pub(super) channel_ids: BTreeMap<u16, u16>,
    /// The file's messages table, when it is a `.db3` bag file.
    pub(super) db3: Option<Db3>,
}

impl LogReader {
    /// Opens the files of a split bag (`files`, in recording order, at least two) as one log
    /// named `path`, without its rig.
    pub(super) fn open_split(
        path: &Path,
        files: &[PathBuf],
        limits: ReadLimits,
    ) -> Result<LogReader, LogError> {
        // A file with nothing readable in it (a recorder that died just after starting a new
        // file leaves it empty) is an issue, not the end of the recording: the first file
        // that opens is the log's first, a later one that does not is skipped.
        let mut unreadable = Vec::new();
        let mut files = files.iter();
        let first = loop {
            let Some(f) = files.next() else {
                // Nothing opened: the first file's error says why.
                let (_, e) = unreadable.into_iter().next().ok_or(LogError::NotMcap {
                    path: path.to_path_buf(),
                })?;
                return Err(e);
            };
            match Self::open_one(f, limits, None) {
                Ok(r) => break r,
                Err(e) if e.is_unreadable_file() => unreadable.push((f.clone(), e)),
                Err(e) => return Err(e),
            }
        };
        let parts = files.map(|f| Self::open_one(f, limits, None).map_err(|e| (f.clone(), e)));
        let mut r = Self::join(path.to_path_buf(), first, parts)?;
        for (f, e) in unreadable {
            r.unreadable_part(&f, &e);
        }
        Ok(r)
    }

    /// The files of a split bag (each opened alone, `first` then `rest` in recording order)
    /// as one log named `path`: channels matched by topic, schema and encoding (a channel
    /// only a later file has gets a fresh id), blocks merged by start time, issues prefixed
    /// with their file. The parts are opened one by one as they are joined, so that the
    /// decompressed copies of compressed files stay within their disk budget (`unpack`).
    fn join(
        path: PathBuf,
        first: LogReader,
        rest: impl Iterator<Item = Result<LogReader, (PathBuf, LogError)>>,
    ) -> Result<LogReader, LogError> {
        let mut log = first;
        let first_name = file_name(&log.path);
        for issue in &mut log.issues {
            issue.detail = format!("{first_name}: {}", issue.detail);
        }
        let mut span = (!log.blocks.is_empty()).then_some(log.range);
        for part in rest {
            let part = match part {
                Ok(part) => part,
                Err((f, e)) if e.is_unreadable_file() => {
                    log.unreadable_part(&f, &e);
                    continue;
                }
                Err((_, e)) => return Err(e),
            };
            let index = log.more_files.len() + 1;
            let name = file_name(&part.path);
            let has_blocks = !part.blocks.is_empty();
            let mut channel_ids = BTreeMap::new();
            for (local, ch) in &part.channels {
                let same = log.channels.iter().find(|(_, c)| {
                    (&c.topic, &c.schema, &c.encoding) == (&ch.topic, &ch.schema, &ch.encoding)
                });
                let id = match same {
                    Some((id, _)) => Some(*id),
                    None => {
                        let fresh = log
                            .channels
                            .keys()
                            .next_back()
                            .map_or(Some(0), |m| m.checked_add(1));
                        if let Some(id) = fresh {
                            log.channels.insert(id, ch.clone());
                        }
                        fresh
                    }
                };
                match id {
                    Some(id) => {
                        channel_ids.insert(*local, id);
                    }
                    None => log.issue(
                        LogIssueKind::OverLimit,
                        format!(
                            "{name}: channel {} ({}) is over the 65536 channels a log can have; its messages are skipped",
                            ch.topic, ch.schema
                        ),
                    ),
                }
            }
            for mut b in part.blocks {
                b.part = index;
                b.channels = b.channels.map(|ids| {
                    ids.iter()
                        .filter_map(|l| channel_ids.get(l).copied())
                        .collect()
                });
                log.blocks.push(b);
            }
            if has_blocks {
                span = Some(match span {
                    Some((a, b)) => (a.min(part.range.0), b.max(part.range.1)),
                    None => part.range,
                });
            }
            for i in part.issues {
                log.issue(i.kind, format!("{name}: {}", i.detail));
            }
            log.indexed &= part.indexed;
            log.total_bytes += part.total_bytes;
            log.more_files.push(MoreFile {
                path: part.path,
                file: part.file,
                channel_ids,
                db3: part.db3,
            });
            // Opening the file made its copy if it is compressed: keep within the budget.
            log.make_room_for(None);
        }
        log.range = span.unwrap_or((0, 0));
        log.blocks.sort_by_key(|b| (b.start_ns, b.part, b.offset));
        log.path = path;
        Ok(log)
    }

    /// Records that the file `f` of a split bag has nothing readable (`e` says why).
    fn unreadable_part(&mut self, f: &Path, e: &LogError) {
        self.issue(
            LogIssueKind::UnreadableFile,
            format!(
                "{}: nothing in it can be read ({e}); its messages are missing, the bag's other \
                 files are read",
                file_name(f)
            ),
        );
    }

    /// `"<file name>: "` for a block of a split bag (its issues name their file), else empty.
    pub(super) fn part_name(&self, part: usize) -> String {
        if self.more_files.is_empty() {
            return String::new();
        }
        let path = match part {
            0 => &self.first_file,
            k => &self.more_files[k - 1].path,
        };
        format!("{}: ", file_name(path))
    }
}

/// The file name of `path` (the whole path when it has none), for issues naming their file.
fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
