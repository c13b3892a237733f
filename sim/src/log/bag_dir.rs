//! A ROS 2 bag as `ros2 bag record` leaves it: a directory holding `metadata.yaml` and the
//! storage files it lists — one MCAP file, or several when the recording was split
//! (`--max-bag-size`, `--max-bag-duration`, or a recorder that split on its own).
//!
//! Promises: [`bag_files`] returns the directory's storage files in recording order —
//! `metadata.yaml`'s `relative_file_paths` when it has one (the storage plugin must be
//! `mcap` or `sqlite3`), else every `*.mcap` file of the directory (or, when it has none,
//! every `*.db3` file: SQLite storage, the default of ROS 2 Humble and earlier), ordered by
//! the split index `ros2 bag` appends (`…_0.mcap`, `…_1.mcap`, …, `…_10.mcap`) and then by
//! name. A file-compressed bag (`ros2 bag record --compression-mode file`) has its files as
//! `….mcap.zstd` or `….db3.zstd`: they count as MCAP or `.db3` files (the reader
//! decompresses them, `unpack`), and where a file is there both compressed and plain (a
//! recorder stopped while compressing it), the plain one is read; a listed file that is
//! missing while its plain or compressed twin is there is read as that twin. Another storage
//! plugin or compression format, a listed file that is missing and a directory without any
//! bag file are each a [`LogError::Bag`] that says what to do. [`super::LogReader`] reads
//! the files as one log.
//! Cost: one small file read and a directory listing, at open.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::LogError;

/// The parts of `metadata.yaml` redline uses.
#[derive(Debug, Deserialize)]
struct Metadata {
    rosbag2_bagfile_information: BagInfo,
}

#[derive(Debug, Deserialize)]
struct BagInfo {
    #[serde(default)]
    storage_identifier: String,
    #[serde(default)]
    relative_file_paths: Vec<String>,
    #[serde(default)]
    compression_mode: String,
    #[serde(default)]
    compression_format: String,
}

/// How to convert a bag to MCAP, for error messages.
const CONVERT: &str = "convert it with `ros2 bag convert -i BAG -o out.yaml`, where out.yaml \
     holds `output_bags: [{uri: BAG_mcap, storage_id: mcap}]`";

/// The MCAP files of the bag directory `dir`, in recording order (see the module docs).
pub(super) fn bag_files(dir: &Path) -> Result<Vec<PathBuf>, LogError> {
    let bag_error = |why: String| LogError::Bag {
        path: dir.to_path_buf(),
        why,
    };
    let meta_path = dir.join("metadata.yaml");
    if meta_path.is_file() {
        let text = std::fs::read_to_string(&meta_path).map_err(|source| LogError::Io {
            path: meta_path.clone(),
            source,
        })?;
        let meta: Metadata = serde_yaml_ng::from_str(&text).map_err(|e| {
            bag_error(format!(
                "its metadata.yaml cannot be read as a ROS 2 bag's ({e}); remove it to read \
                 the directory's *.mcap files in name order"
            ))
        })?;
        let info = meta.rosbag2_bagfile_information;
        let storage = info.storage_identifier.as_str();
        if !storage.is_empty() && storage != "mcap" && storage != "sqlite3" {
            return Err(bag_error(format!(
                "its storage is {storage:?}; redline reads MCAP and SQLite (sqlite3) bags: {CONVERT}"
            )));
        }
        let format = info.compression_format.as_str();
        if info.compression_mode.eq_ignore_ascii_case("file")
            && !format.is_empty()
            && !format.eq_ignore_ascii_case("zstd")
        {
            return Err(bag_error(format!(
                "its files are compressed whole with {format:?}; redline decompresses zstd: \
                 decompress them with `ros2 bag decompress` (or {CONVERT})"
            )));
        }
        if !info.relative_file_paths.is_empty() {
            let mut files = Vec::with_capacity(info.relative_file_paths.len());
            for listed in &info.relative_file_paths {
                let file = dir.join(listed);
                match [file.clone(), twin(&file)]
                    .into_iter()
                    .find(|f| f.is_file())
                {
                    Some(f) => files.push(f),
                    None => {
                        return Err(bag_error(format!(
                            "its metadata.yaml lists {}, which is not there; copy the whole \
                             bag directory, or remove metadata.yaml to read the bag files present",
                            file.display()
                        )))
                    }
                }
            }
            return Ok(files);
        }
    }
    let listing = std::fs::read_dir(dir).map_err(|source| LogError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files = Vec::new();
    let mut db3 = Vec::new();
    for entry in listing {
        let path = entry
            .map_err(|source| LogError::Io {
                path: dir.to_path_buf(),
                source,
            })?
            .path();
        if !path.is_file() {
            continue;
        }
        match plain(&path).extension().and_then(|e| e.to_str()) {
            Some("mcap") => files.push(path),
            Some("db3") => db3.push(path),
            _ => {}
        }
    }
    if files.is_empty() {
        // A converted bag may keep its SQLite files beside the MCAP ones: MCAP first.
        files = db3;
    }
    if files.is_empty() {
        return Err(bag_error(
            "it holds no metadata.yaml and no *.mcap or *.db3 file; pass a ROS 2 bag \
             directory, an MCAP file or a .db3 file"
                .to_string(),
        ));
    }
    // A file there both plain and compressed: the compression did not finish; read the plain.
    let both: Vec<PathBuf> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == ZSTD) && files.contains(&twin(f)))
        .cloned()
        .collect();
    files.retain(|f| !both.contains(f));
    files.sort_by_key(|f| (split_index(f), plain(f)));
    Ok(files)
}

/// The extension rosbag2's file compression adds.
const ZSTD: &str = "zstd";

/// A bag file's name without the compression extension (`b_0.db3.zstd` → `b_0.db3`).
fn plain(f: &Path) -> PathBuf {
    match f.extension() {
        Some(e) if e == ZSTD => f.with_extension(""),
        _ => f.to_path_buf(),
    }
}

/// The same bag file compressed if `f` is plain, plain if it is compressed.
fn twin(f: &Path) -> PathBuf {
    if f.extension().is_some_and(|e| e == ZSTD) {
        return plain(f);
    }
    let mut name = f.as_os_str().to_os_string();
    name.push(".zstd");
    PathBuf::from(name)
}

/// The split index `ros2 bag` appends to a file name (`name_12.mcap` → 12, also for
/// `name_12.mcap.zstd`); files without one sort first.
fn split_index(f: &Path) -> Option<u64> {
    let plain = plain(f);
    let stem = plain.file_stem()?.to_str()?;
    stem.rsplit_once('_')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    fn names(files: &[PathBuf]) -> Vec<String> {
        files
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    }

    const META: &str = "rosbag2_bagfile_information:\n  version: 5\n  storage_identifier: mcap\n  \
        duration:\n    nanoseconds: 4000000000\n  relative_file_paths:\n    - b_0.mcap\n    \
        - b_1.mcap\n  compression_format: \"\"\n  compression_mode: \"\"\n";

    #[test]
    fn metadata_lists_the_files_in_order() {
        let dir = dir_with(&[("metadata.yaml", META), ("b_1.mcap", ""), ("b_0.mcap", "")]);
        assert_eq!(
            names(&bag_files(dir.path()).unwrap()),
            ["b_0.mcap", "b_1.mcap"]
        );
    }

    #[test]
    fn without_metadata_the_split_index_orders_the_files() {
        let dir = dir_with(&[
            ("r_10.mcap", ""),
            ("r_2.mcap", ""),
            ("r_0.mcap", ""),
            ("x.txt", ""),
        ]);
        assert_eq!(
            names(&bag_files(dir.path()).unwrap()),
            ["r_0.mcap", "r_2.mcap", "r_10.mcap"]
        );
    }

    #[test]
    fn every_bag_redline_cannot_read_says_what_to_do() {
        let err = |dir: &tempfile::TempDir| bag_files(dir.path()).unwrap_err().to_string();
        let other = META.replace("storage_identifier: mcap", "storage_identifier: bagfs");
        let e = err(&dir_with(&[("metadata.yaml", &other)]));
        assert!(
            e.contains("\"bagfs\"") && e.contains("ros2 bag convert"),
            "{e}"
        );
        let lz4 = META
            .replace("compression_mode: \"\"", "compression_mode: FILE")
            .replace("compression_format: \"\"", "compression_format: lz4");
        let e = err(&dir_with(&[("metadata.yaml", &lz4)]));
        assert!(
            e.contains("\"lz4\"") && e.contains("ros2 bag decompress"),
            "{e}"
        );
        let e = err(&dir_with(&[("metadata.yaml", META), ("b_0.mcap", "")]));
        assert!(e.contains("b_1.mcap") && e.contains("not there"), "{e}");
        let e = err(&dir_with(&[("metadata.yaml", "{not: [yaml")]));
        assert!(e.contains("metadata.yaml cannot be read"), "{e}");
        let e = err(&dir_with(&[("notes.txt", "")]));
        assert!(e.contains("no *.mcap"), "{e}");
    }

    #[test]
    fn sqlite_bags_list_their_db3_files_and_mcap_wins_beside_them() {
        let sqlite = META
            .replace("storage_identifier: mcap", "storage_identifier: sqlite3")
            .replace(".mcap", ".db3");
        let dir = dir_with(&[("metadata.yaml", &sqlite), ("b_1.db3", ""), ("b_0.db3", "")]);
        assert_eq!(
            names(&bag_files(dir.path()).unwrap()),
            ["b_0.db3", "b_1.db3"]
        );
        let dir = dir_with(&[("old_10.db3", ""), ("old_9.db3", "")]);
        assert_eq!(
            names(&bag_files(dir.path()).unwrap()),
            ["old_9.db3", "old_10.db3"]
        );
        let dir = dir_with(&[("old_0.db3", ""), ("new_0.mcap", "")]);
        assert_eq!(names(&bag_files(dir.path()).unwrap()), ["new_0.mcap"]);
    }

    #[test]
    fn file_compressed_bags_list_their_zstd_files_and_a_plain_twin_wins() {
        let zstd = META
            .replace("compression_mode: \"\"", "compression_mode: file")
            .replace("compression_format: \"\"", "compression_format: zstd")
            .replace(".mcap\n", ".mcap.zstd\n");
        // Listed compressed; the recorder died before compressing the last file.
        let dir = dir_with(&[
            ("metadata.yaml", &zstd),
            ("b_0.mcap.zstd", ""),
            ("b_1.mcap", ""),
        ]);
        assert_eq!(
            names(&bag_files(dir.path()).unwrap()),
            ["b_0.mcap.zstd", "b_1.mcap"]
        );
        let dir = dir_with(&[
            ("r_10.db3.zstd", ""),
            ("r_2.db3.zstd", ""),
            ("r_11.db3", ""),
            ("r_11.db3.zstd", ""),
            ("r_0.db3", ""),
        ]);
        assert_eq!(
            names(&bag_files(dir.path()).unwrap()),
            ["r_0.db3", "r_2.db3.zstd", "r_10.db3.zstd", "r_11.db3"]
        );
        let dir = dir_with(&[("old_0.db3.zstd", ""), ("new_0.mcap.zstd", "")]);
        assert_eq!(names(&bag_files(dir.path()).unwrap()), ["new_0.mcap.zstd"]);
    }
}
