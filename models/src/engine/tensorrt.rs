//! The `tensorrt` engine: a model compiled into TensorRT engines by ONNX Runtime's TensorRT
//! execution provider (cargo feature `tensorrt`, which implies `cuda`), the engines built on
//! the target and cached.
//!
//! # Contract
//!
//! - **Probed in order, each failure a clear error** ([`load`]): the build has the feature;
//!   `libonnxruntime` loads ([`super::onnxruntime::find_library`]) and offers the
//!   `TensorrtExecutionProvider` (the PyPI `onnxruntime` wheel is CPU-only:
//!   `onnxruntime-gpu` with TensorRT 10 is needed); a GPU is present ([`super::cuda::probe`]);
//!   `libnvinfer` loads and reports its version ([`tensorrt_version`]).
//! - **Built on the target, cached under a key** ([`cache_key`]): GPU name, compute
//!   capability, TensorRT version, precision and the FNV-1a hash of the model's bytes name the cache
//!   folder (`<cache root>/<key>/`, root `REDLINE_TRT_CACHE` or `~/.cache/redline/tensorrt`),
//!   which holds ORT's engine and timing caches. Any change of those five gives another
//!   folder, so a stale engine is never reused: it is rebuilt (and the old folder left for
//!   the user to delete). `redline engine build` builds ahead of time.
//! - **No silent fallback**: the provider is registered with ORT's error-on-failure, and the
//!   session disables the CPU fallback (`session.disable_cpu_ep_fallback`): a node
//!   TensorRT cannot take is a load error naming it, not a CPU kernel in the hot path.
//! - Otherwise an [`super::onnxruntime::OrtEngine`] (same I/O contract and the same caveats:
//!   ORT allocates inside runs, TensorRT's results are not bit-identical to the CPU's).
//!
//! # Not yet
//!
//! Handing the runtime's CUDA stream to the provider (`user_compute_stream`), and everything
//! past the errors: no machine this project runs on has TensorRT, so building, caching and
//! running engines has never been exercised (compile-checked; the error paths are tested).

use super::onnxruntime::OrtEngine;
#[cfg(feature = "tensorrt")]
use super::onnxruntime::OrtOptions;
use super::EngineError;
use std::path::{Path, PathBuf};

/// The precision TensorRT builds for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Precision {
    /// INT8 from the model's Q/DQ nodes (explicit quantization), fp16 where TensorRT prefers.
    #[default]
    Int8,
    /// FP16 (the Q/DQ nodes still decide what runs in INT8).
    Fp16,
    /// FP32 only.
    Fp32,
}

impl Precision {
    /// `int8`, `fp16` or `fp32`.
    pub const fn name(self) -> &'static str {
        match self {
            Precision::Int8 => "int8",
            Precision::Fp16 => "fp16",
            Precision::Fp32 => "fp32",
        }
    }

    /// Parses a name as [`Precision::name`] writes it.
    pub fn parse(s: &str) -> Option<Precision> {
        match s {
            "int8" => Some(Precision::Int8),
            "fp16" => Some(Precision::Fp16),
            "fp32" => Some(Precision::Fp32),
            _ => None,
        }
    }
}

/// How the TensorRT provider is set up for one session (a field of
/// [`super::onnxruntime::OrtOptions`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRtProvider {
    /// CUDA device ordinal.
    pub device: i32,
    /// Build precision.
    pub precision: Precision,
    /// The keyed cache folder (engines and timing cache).
    pub cache_dir: PathBuf,
}

/// Options of [`load`].
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TensorRtOptions {
    /// CUDA device ordinal.
    pub device: usize,
    /// Build precision.
    pub precision: Precision,
    /// Cache root (default: `REDLINE_TRT_CACHE`, else `~/.cache/redline/tensorrt`).
    pub cache_root: Option<PathBuf>,
}

/// The cache folder name of an engine: every input that makes a built engine invalid
/// (`"NVIDIA-H100-80GB-HBM3_sm90_trt10.3.0_int8_0123456789abcdef"`).
pub fn cache_key(
    gpu: &str,
    compute_capability: (i32, i32),
    trt_version: &str,
    precision: Precision,
    model: &[u8],
) -> String {
    let gpu: String = gpu
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    format!(
        "{gpu}_sm{}{}_trt{trt_version}_{}_{:016x}",
        compute_capability.0,
        compute_capability.1,
        precision.name(),
        redline_runtime::publish::fnv1a(redline_runtime::publish::FNV1A_START, model)
    )
}

/// The cache root: `REDLINE_TRT_CACHE`, else `$HOME/.cache/redline/tensorrt`.
pub fn default_cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("REDLINE_TRT_CACHE").filter(|v| !v.is_empty()) {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/redline/tensorrt")
}

/// The TensorRT library's version (`getInferLibVersion` of `libnvinfer.so.10` or
/// `libnvinfer.so`), or why it cannot be loaded.
pub fn tensorrt_version() -> Result<String, EngineError> {
    for name in ["libnvinfer.so.10", "libnvinfer.so"] {
        let cname = std::ffi::CString::new(name).map_err(|_| EngineError::Run("name"))?;
        // SAFETY: dlopen of a NUL-terminated name; the handle is closed below.
        let h = unsafe { libc::dlopen(cname.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            continue;
        }
        // SAFETY: `h` is a live handle; the symbol name is NUL-terminated.
        let sym = unsafe { libc::dlsym(h, c"getInferLibVersion".as_ptr()) };
        let version = if sym.is_null() {
            None
        } else {
            // SAFETY: TensorRT's `int32_t getInferLibVersion() noexcept` (NvInferRuntime.h),
            // a C-ABI function without arguments.
            let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(sym) };
            Some(f())
        };
        // SAFETY: closes the handle opened above; no symbol of it is used afterwards.
        unsafe { libc::dlclose(h) };
        if let Some(v) = version {
            // 10.3.0 is 100300 (major * 10000 + minor * 100 + patch) in TensorRT 10.
            return Ok(format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100));
        }
    }
    Err(EngineError::Backend(
        "TensorRT (libnvinfer.so.10) could not be loaded: install TensorRT 10 and put its lib \
         folder on LD_LIBRARY_PATH, or use engine = \"cuda\""
            .into(),
    ))
}

/// Loads `path` on ONNX Runtime's TensorRT provider, checking everything the module docs
/// list first. Returns the engine and its cache folder.
pub fn load(path: &Path, opts: &TensorRtOptions) -> Result<(OrtEngine, PathBuf), EngineError> {
    let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    load_bytes(&bytes, path, opts)
}

/// [`load`] from the bytes of an `.onnx` file (`name` is used in messages).
pub fn load_bytes(
    bytes: &[u8],
    name: &Path,
    opts: &TensorRtOptions,
) -> Result<(OrtEngine, PathBuf), EngineError> {
    #[cfg(not(feature = "tensorrt"))]
    {
        let _ = (bytes, name, opts);
        Err(EngineError::Backend(
            "this redline was built without TensorRT support: rebuild with `--features \
             tensorrt` (it implies `cuda`)"
                .into(),
        ))
    }
    #[cfg(feature = "tensorrt")]
    {
        if !super::onnxruntime::tensorrt_provider_available()? {
            return Err(EngineError::Backend(format!(
                "the ONNX Runtime in use ({}) has no TensorRT execution provider (the PyPI \
                 `onnxruntime` wheel is CPU-only): install `onnxruntime-gpu` built with \
                 TensorRT 10 and set ORT_DYLIB_PATH to its libonnxruntime.so, or use \
                 engine = \"cuda\"",
                super::onnxruntime::loaded_library()
                    .map_or_else(|| "?".into(), |p| p.display().to_string())
            )));
        }
        let gpu = super::cuda::probe(opts.device)?;
        let trt = tensorrt_version()?;
        let key = cache_key(
            &gpu.name,
            gpu.compute_capability,
            &trt,
            opts.precision,
            bytes,
        );
        let dir = opts
            .cache_root
            .clone()
            .unwrap_or_else(default_cache_root)
            .join(key);
        std::fs::create_dir_all(&dir).map_err(|source| EngineError::Io {
            path: dir.clone(),
            source,
        })?;
        let ort = OrtOptions {
            threads: 1,
            qdq_int8_allowed: true,
            tensorrt: Some(TensorRtProvider {
                device: opts.device as i32,
                precision: opts.precision,
                cache_dir: dir.clone(),
            }),
            ..OrtOptions::default()
        };
        let mut e = OrtEngine::from_bytes(bytes, name, &ort)?;
        if let Ok(n) = crate::onnx::NativeEngine::from_bytes(bytes, &name.to_string_lossy()) {
            e.set_macs(super::Engine::macs(&n));
        }
        Ok((e, dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_changes_with_each_input_and_only_then() {
        let base = cache_key(
            "NVIDIA H100 80GB HBM3",
            (9, 0),
            "10.3.0",
            Precision::Int8,
            b"m",
        );
        assert_eq!(
            base,
            cache_key(
                "NVIDIA H100 80GB HBM3",
                (9, 0),
                "10.3.0",
                Precision::Int8,
                b"m"
            )
        );
        assert!(
            base.starts_with("NVIDIA-H100-80GB-HBM3_sm90_trt10.3.0_int8_"),
            "{base}"
        );
        for other in [
            cache_key("NVIDIA H200", (9, 0), "10.3.0", Precision::Int8, b"m"),
            cache_key(
                "NVIDIA H100 80GB HBM3",
                (8, 7),
                "10.3.0",
                Precision::Int8,
                b"m",
            ),
            cache_key(
                "NVIDIA H100 80GB HBM3",
                (9, 0),
                "10.4.0",
                Precision::Int8,
                b"m",
            ),
            cache_key(
                "NVIDIA H100 80GB HBM3",
                (9, 0),
                "10.3.0",
                Precision::Fp16,
                b"m",
            ),
            cache_key(
                "NVIDIA H100 80GB HBM3",
                (9, 0),
                "10.3.0",
                Precision::Int8,
                b"n",
            ),
        ] {
            assert_ne!(other, base);
        }
    }

    #[test]
    fn precisions_parse_back() {
        for p in [Precision::Int8, Precision::Fp16, Precision::Fp32] {
            assert_eq!(Precision::parse(p.name()), Some(p));
        }
        assert_eq!(Precision::parse("int4"), None);
    }

    #[test]
    fn without_tensorrt_loading_is_a_clear_error() {
        // No machine of this project has TensorRT: whichever check fails first (the feature,
        // ONNX Runtime, its provider list, the GPU, libnvinfer), the error says what to do.
        let r = load_bytes(
            crate::export::builtin::BACKBONE,
            Path::new("backbone.onnx"),
            &TensorRtOptions::default(),
        );
        match r {
            Ok(_) => eprintln!("TensorRT is present here: the error paths were not reached"),
            Err(e) => {
                let m = e.to_string();
                let clear = [
                    "--features tensorrt",
                    "TensorRT",
                    "onnxruntime",
                    "driver",
                    "NVRTC",
                ]
                .iter()
                .any(|w| m.contains(w));
                assert!(clear, "unclear error: {m}");
                eprintln!("expected error: {m}");
            }
        }
        if let Err(e) = tensorrt_version() {
            assert!(e.to_string().contains("libnvinfer"), "{e}");
        }
    }
}
