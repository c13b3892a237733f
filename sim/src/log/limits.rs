//! [`ReadLimits`]: how much a log may make redline allocate.
//!
//! Contract: every length read from a log file — record lengths, chunk compressed and
//! uncompressed sizes, the summary section, string and map lengths, message data — is checked
//! against the bytes that are really left (in the file, the record or the decompressed chunk)
//! *and* against these limits before anything is allocated for it. A length over a limit is
//! damage reported as a [`LogIssue`](super::LogIssue) naming the record, its offset, the length
//! and the limit (the chunk or record is skipped); it never reaches the allocator. The replay
//! feed ([`crate::feed::Feed::from_log_with`]) checks its frame count and the size of its
//! image buffers against the last two limits before it allocates each frame, and refuses the
//! log with the knob to turn. (The frames are first grouped from the whole log in memory by
//! [`crate::replay::read_frames`]; each message there is bounded by the limits above, their
//! number by the file's size. Streaming replay is a later step.)
//!
//! The defaults admit any log a ROS 2 or Foxglove recorder writes (chunks of a few MiB, images
//! up to 8K) and stop a corrupt length long before it could exhaust memory. They are the `[log]`
//! table of the `redline` config file (every key optional, in bytes where a size):
//!
//! ```toml
//! [log]
//! max_record_bytes = 268435456    # 256 MiB
//! max_chunk_bytes = 268435456     # 256 MiB, decompressed
//! max_summary_bytes = 67108864    # 64 MiB
//! max_name_bytes = 4096
//! max_buffered_bytes = 1073741824 # 1 GiB
//! max_cameras = 32
//! max_image_side = 8192
//! max_frames = 1000000
//! max_feed_bytes = 8589934592     # 8 GiB
//! max_unpacked_bytes = 1099511627776 # 1 TiB, a file-compressed bag file decompressed
//! unpacked_disk_bytes = 17179869184   # 16 GiB of such copies on disk at once
//! ```

use serde::{Deserialize, Serialize};

/// Limits on what a log may make the reader and the replay feed allocate. See the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReadLimits {
    /// Largest record body in the file (a chunk's compressed record, a loose message, a
    /// schema, a channel, a summary record), bytes. Default 256 MiB.
    pub max_record_bytes: u64,
    /// Largest decompressed chunk, bytes: bounds the decompression output. Default 256 MiB.
    pub max_chunk_bytes: u64,
    /// Largest summary section (read whole at open), bytes. Default 64 MiB.
    pub max_summary_bytes: u64,
    /// Longest name (topic, schema name, encoding, compression), bytes. Default 4096.
    pub max_name_bytes: u64,
    /// Decompressed message data held at once while merging chunks that overlap in time,
    /// bytes. Past it, messages are released before the next chunk is read (log-time order
    /// may then break, and an issue says so). Default 1 GiB.
    pub max_buffered_bytes: u64,
    /// Most cameras (`camera_info` topics) a log may declare; the feed's presence mask has 32
    /// bits. Default 32.
    pub max_cameras: usize,
    /// Largest image width or height a `camera_info` may declare, or a video camera's
    /// sequence (H.264 or H.265; refused before its pictures are decoded), px. Default 8192.
    pub max_image_side: u32,
    /// Most frames a replay feed holds. Default 1,000,000 (9 hours at 30 Hz).
    pub max_frames: u64,
    /// Largest replay feed (every frame's images, decoded, in memory), bytes. Default 8 GiB.
    pub max_feed_bytes: u64,
    /// Largest log file decompressed whole (a file-compressed bag's `.mcap.zstd` or
    /// `.db3.zstd`, decompressed into a temporary file before it is read), bytes. Default
    /// 1 TiB.
    pub max_unpacked_bytes: u64,
    /// Temporary disk the decompressed copies of one log's compressed files may take at
    /// once, bytes: past it, the copies read least recently are dropped and made again
    /// when read (each such file is then decompressed once more per pass). One file's copy
    /// is always allowed. Default 16 GiB.
    pub unpacked_disk_bytes: u64,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_record_bytes: 256 << 20,
            max_chunk_bytes: 256 << 20,
            max_summary_bytes: 64 << 20,
            max_name_bytes: 4096,
            max_buffered_bytes: 1 << 30,
            max_cameras: 32,
            max_image_side: 8192,
            max_frames: 1_000_000,
            max_feed_bytes: 8 << 30,
            max_unpacked_bytes: 1 << 40,
            unpacked_disk_bytes: 16 << 30,
        }
    }
}

impl ReadLimits {
    /// Small limits for fuzzing and tests: 8 MiB records and chunks, 1 MiB summary, 256-byte
    /// names, 64 MiB buffered, fed or decompressed whole, 8 cameras of at most 1024 px,
    /// 10,000 frames.
    pub fn small() -> Self {
        ReadLimits {
            max_record_bytes: 8 << 20,
            max_chunk_bytes: 8 << 20,
            max_summary_bytes: 1 << 20,
            max_name_bytes: 256,
            max_buffered_bytes: 64 << 20,
            max_cameras: 8,
            max_image_side: 1024,
            max_frames: 10_000,
            max_feed_bytes: 64 << 20,
            max_unpacked_bytes: 64 << 20,
            unpacked_disk_bytes: 64 << 20,
        }
    }

    /// Checks that every limit is usable (non-zero, cameras within the feed's 32-bit mask).
    pub fn validate(&self) -> Result<(), String> {
        let sizes = [
            ("max_record_bytes", self.max_record_bytes),
            ("max_chunk_bytes", self.max_chunk_bytes),
            ("max_summary_bytes", self.max_summary_bytes),
            ("max_name_bytes", self.max_name_bytes),
            ("max_buffered_bytes", self.max_buffered_bytes),
            ("max_image_side", u64::from(self.max_image_side)),
            ("max_frames", self.max_frames),
            ("max_feed_bytes", self.max_feed_bytes),
            ("max_unpacked_bytes", self.max_unpacked_bytes),
            ("unpacked_disk_bytes", self.unpacked_disk_bytes),
        ];
        if let Some((name, _)) = sizes.iter().find(|(_, v)| *v == 0) {
            return Err(format!("[log] {name} = 0: give a positive limit"));
        }
        if !(1..=32).contains(&self.max_cameras) {
            return Err(format!(
                "[log] max_cameras = {}: use 1 to 32 (the replay feed marks cameras present in a 32-bit mask)",
                self.max_cameras
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_small_validate_and_bad_ones_do_not() {
        ReadLimits::default().validate().unwrap();
        ReadLimits::small().validate().unwrap();
        let zero = ReadLimits {
            max_chunk_bytes: 0,
            ..ReadLimits::default()
        };
        assert!(zero.validate().unwrap_err().contains("max_chunk_bytes"));
        let cams = ReadLimits {
            max_cameras: 33,
            ..ReadLimits::default()
        };
        assert!(cams.validate().unwrap_err().contains("max_cameras"));
    }
}
