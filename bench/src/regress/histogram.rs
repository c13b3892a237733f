//! One histogram kept whole in a measurement file: HdrHistogram's V2 deflate encoding in
//! base64 (the encoding HdrHistogram's own tools read), with its sample count for readers
//! of the JSON.
//!
//! Contract: [`EncodedHistogram::encode`] then [`EncodedHistogram::decode`] gives back the
//! same histogram, bucket by bucket; a corrupt encoding is a [`HistogramError`] that says
//! what is wrong, never a panic or a silently different histogram. Off the hot path
//! (allocates, compresses).

use base64::Engine as _;
use hdrhistogram::serialization::{
    DeserializeError, Deserializer, Serializer, V2DeflateSerializer,
};
use redline_runtime::metrics::{LatencyHistogram, OutOfRange};
use serde::{Deserialize, Serialize};

/// A histogram, whole, in HdrHistogram's V2 deflate encoding (base64).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncodedHistogram {
    /// `end_to_end` or a stage name.
    pub name: String,
    /// Samples (for readers of the JSON; checked against the decoding).
    pub count: u64,
    /// Values above the histogram's 60 s range, clamped.
    pub saturated: u64,
    /// HdrHistogram V2 deflate encoding, base64 (standard alphabet, padded).
    pub v2_deflate_base64: String,
}

impl EncodedHistogram {
    /// Encodes `h` under `name`.
    pub fn encode(name: &str, h: &LatencyHistogram) -> EncodedHistogram {
        let mut bytes = Vec::new();
        // Cannot fail for an in-memory Vec and a histogram of valid bounds; an empty
        // string would be refused on decode, never read as an empty histogram.
        let _ = V2DeflateSerializer::new().serialize(h.as_hdr(), &mut bytes);
        EncodedHistogram {
            name: name.to_string(),
            count: h.count(),
            saturated: h.saturated(),
            v2_deflate_base64: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }

    /// Decodes the histogram; the error says what is wrong with it.
    pub fn decode(&self) -> Result<LatencyHistogram, HistogramError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(self.v2_deflate_base64.trim())
            .map_err(HistogramError::NotBase64)?;
        let hdr: hdrhistogram::Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(HistogramError::NotHdrHistogram)?;
        let h = LatencyHistogram::try_from_hdr(&hdr, self.saturated)?;
        if h.count() != self.count {
            return Err(HistogramError::CountMismatch {
                decoded: h.count(),
                stated: self.count,
            });
        }
        Ok(h)
    }
}

/// Why an [`EncodedHistogram`] does not decode.
#[derive(Debug, thiserror::Error)]
pub enum HistogramError {
    /// The text is not base64.
    #[error("not base64: {0}")]
    NotBase64(base64::DecodeError),
    /// The bytes are not an HdrHistogram V2 (deflate) encoding.
    #[error("not an HdrHistogram V2 encoding: {0:?}")]
    NotHdrHistogram(DeserializeError),
    /// It holds values outside the latency histogram's range.
    #[error(transparent)]
    OutOfRange(#[from] OutOfRange),
    /// It decodes to another number of samples than the file states.
    #[error("holds {decoded} samples but the file says count = {stated}")]
    CountMismatch {
        /// Samples in the decoded histogram.
        decoded: u64,
        /// The `count` field of the file.
        stated: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings_round_trip_and_corruption_is_named() {
        let mut h = LatencyHistogram::new();
        (1..=500u64).for_each(|v| h.record(v * 997));
        let e = EncodedHistogram::encode("backbone", &h);
        assert_eq!((e.name.as_str(), e.count), ("backbone", 500));
        let back = e.decode().unwrap();
        assert_eq!(back.summary(), h.summary());
        let recorded = |h: &LatencyHistogram| -> Vec<(u64, u64)> {
            h.as_hdr()
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect()
        };
        assert_eq!(recorded(&back), recorded(&h));

        let with = |text: &str| EncodedHistogram {
            v2_deflate_base64: text.into(),
            ..e.clone()
        };
        assert!(matches!(
            with("%%%").decode(),
            Err(HistogramError::NotBase64(_))
        ));
        assert!(matches!(
            with("AAAAAAAA").decode(),
            Err(HistogramError::NotHdrHistogram(_))
        ));
        let wrong_count = EncodedHistogram { count: 7, ..e };
        assert_eq!(
            wrong_count.decode().unwrap_err().to_string(),
            "holds 500 samples but the file says count = 7"
        );
    }
}
