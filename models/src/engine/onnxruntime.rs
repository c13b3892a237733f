//! The `onnxruntime` backend: ONNX Runtime's CPU provider through the `ort` crate, with
//! `libonnxruntime` loaded at run time (nothing downloaded at build time, nothing linked).
//!
//! # Contract
//!
//! - **Finding the library** ([`find_library`]): `ORT_DYLIB_PATH` if set and
//!   not empty (it must name an existing file, or the error names it); otherwise the
//!   `capi/libonnxruntime.so*` inside the installed Python `onnxruntime` package, asked from
//!   `python3`. Nothing found is an [`EngineError::Backend`] that says how to fix it
//!   (`python3 -m pip install onnxruntime`, or `ORT_DYLIB_PATH=/path/to/libonnxruntime.so`).
//!   The library must be ONNX Runtime 1.24 or newer (the `ort` API level this crate is
//!   built with); an older one is an error naming its version.
//! - **Loaded once per process.** The first [`OrtEngine::load`] finds and loads the library
//!   and creates the process's one ONNX Runtime environment; every later load reuses it, even
//!   if `ORT_DYLIB_PATH` changed in between ([`loaded_library`] says which file is in use).
//!   A failure to load is remembered too: later loads return the same error.
//! - **Sessions** ([`OrtEngine::load`]): CPU provider only, [`OrtOptions::threads`] intra-op
//!   threads, one inter-op thread, sequential execution, all graph optimisations.
//! - **Fixed shapes.** Every input and output has a fixed shape, like the native engine's.
//!   A *named* symbolic dimension of an input (`dim_param`, e.g. a batch `N`) is fixed to 1
//!   with ONNX Runtime's free-dimension override (the session is compiled again with
//!   `N = 1`, so ORT plans and optimises for that shape). An *unnamed* dynamic dimension
//!   cannot be overridden and is an [`EngineError::Invalid`] naming the input and the
//!   dimension; so is an output whose shape stays dynamic once the inputs are fixed (a
//!   data-dependent shape). The fix is to export the model with static shapes.
//! - **Element types**: float32, int8, uint8, int32 and int64 inputs and outputs; any other
//!   is an [`EngineError::Unsupported`] naming the tensor.
//! - **Runs**: an input whose caller buffer is aligned for its element type is handed to ORT
//!   as a view of the caller's bytes (no copy); a misaligned one is first copied into a
//!   staging buffer allocated at load. ORT writes every output into a tensor allocated once
//!   at load (preallocated outputs), which is then copied into the caller's slice.
//!
//! # Cost
//!
//! Loading the library: one `python3` start-up when `ORT_DYLIB_PATH` is not set (about
//! 0.1 s) and the `dlopen`, once per process. Loading a model: ORT's session creation (graph
//! optimisation, kernel selection, weight prepacking), twice if an input has a named
//! symbolic dimension. A run: ORT's own inference plus one copy of each output and of each
//! misaligned 4- or 8-byte input.
//!
//! # What it cannot promise
//!
//! This backend is the reference and the peer of the benchmarks, not an engine for the hot
//! path:
//! - ONNX Runtime **allocates inside every run** (the input `OrtValue` wrappers, its
//!   intermediate tensors unless its memory pattern covers them, bookkeeping), so it breaks
//!   the zero-allocation rule of `Stage::run`.
//! - It **owns its own thread pool** (`threads - 1` intra-op worker threads): the `lanes`
//!   argument of [`Engine::run`] is ignored, and the workers are neither pinned nor
//!   SCHED_FIFO like redline's lanes. The workers spin-wait inside a run, as ORT's default
//!   has them, but stop at its end ([`OrtOptions::spin_after_run`] `false`, ORT's
//!   `session.force_spinning_stop`): left spinning, they take the cores from whatever runs
//!   next. In an alternated benchmark that is the other engine: on the 2-core VM, native
//!   ResNet-18 on 2 threads had P99 7.4–9.3 ms against ONNX Runtime with spinning left on,
//!   2.5–2.9 ms with it stopped, while ONNX Runtime's own P50 stayed 2.6–2.9 ms
//!   (`redline model bench … --threads 2 --against onnxruntime`, three runs each).
//! - Its results are **not bit-identical across CPUs or thread counts**: ORT picks kernels
//!   by instruction set (e.g. u8 x s8 products saturate on AVX2 but not with VNNI) and its
//!   float reductions depend on the thread split.
//! - [`Engine::macs`] is whatever the caller set with [`OrtEngine::set_macs`] (ORT cannot
//!   report it; 0 until set). [`Engine::scratch_bytes`] counts only what this wrapper
//!   allocates (staging and output tensors), not ORT's arena, packed weights or threads,
//!   which ORT does not report.
//!
//! # Never
//!
//! Never panics on a missing, broken or too-old library or a bad model: every failure is an
//! [`EngineError`] (a panic inside `ort` while loading the library is caught and turned
//! into one). Never logs: ORT's logger is replaced by one that drops every message (ORT's
//! errors still come back, as [`EngineError`]s). Never writes outside the output slices.

use super::{check_buffers, ElemType, Engine, EngineError, EngineKind, Lanes, TensorSpec};
use ort::environment::Environment;
use ort::logging::LogLevel;
use ort::session::builder::{GraphOptimizationLevel, SessionBuilder};
use ort::session::{HasSelectedOutputs, OutputSelector, RunOptions, Session, SessionInputValue};
use ort::value::{
    DynValue, Outlet, PrimitiveTensorElementType, Tensor, TensorElementType, TensorRef, ValueType,
};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

/// Options of an ONNX Runtime session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrtOptions {
    /// Intra-op threads, including the calling thread (at least 1; 0 is taken as 1).
    pub threads: usize,
    /// `session.qdqisint8allowed`: lets ORT fuse int8 QDQ groups into its integer kernels on
    /// x86 (its default there is off, which leaves many int8 QDQ operators in float).
    pub qdq_int8_allowed: bool,
    /// Run on ONNX Runtime's TensorRT execution provider instead of the CPU provider
    /// ([`super::tensorrt`]; needs the `tensorrt` feature, otherwise a load error).
    pub tensorrt: Option<super::tensorrt::TensorRtProvider>,
    /// Let the intra-op workers keep spin-waiting after a run ends (ORT's own default).
    /// `false` (the default here) sets `session.force_spinning_stop`: they spin during a
    /// run and go to sleep at its end, so they do not take the cores from the next stage or
    /// engine (see the module docs). No effect with one thread (no workers).
    pub spin_after_run: bool,
}

impl Default for OrtOptions {
    fn default() -> Self {
        OrtOptions {
            threads: 1,
            qdq_int8_allowed: false,
            tensorrt: None,
            spin_after_run: false,
        }
    }
}

/// True when the loaded ONNX Runtime offers the TensorRT execution provider (loads the
/// library first; its errors are returned).
#[cfg(feature = "tensorrt")]
pub fn tensorrt_provider_available() -> Result<bool, EngineError> {
    use ort::ep::ExecutionProvider;
    runtime()?;
    ort::ep::TensorRT::is_available().map_err(|e| {
        EngineError::Backend(format!(
            "ONNX Runtime could not list its execution providers: {e}"
        ))
    })
}

/// How to get a usable `libonnxruntime`, appended to every "not found" message.
const INSTALL_HINT: &str = "install ONNX Runtime's Python wheel (python3 -m pip install \
     onnxruntime) or set ORT_DYLIB_PATH=/path/to/libonnxruntime.so";

/// The environment variable naming the library (the one `ort` itself reads).
const ENV_VAR: &str = "ORT_DYLIB_PATH";

/// Where `libonnxruntime` is: `ORT_DYLIB_PATH` if set, else the library inside the installed
/// Python `onnxruntime` package (asks `python3`). See the module docs.
pub fn find_library() -> Result<PathBuf, EngineError> {
    find_library_with(std::env::var_os(ENV_VAR), python_package_dir)
}

/// [`find_library`] with the value of `ORT_DYLIB_PATH` and the Python probe given
/// (the probe returns the `onnxruntime` package's folder, or `None` when there is none; it is
/// called only when the variable is unset or empty).
pub fn find_library_with(
    env: Option<OsString>,
    python_package: impl FnOnce() -> Option<PathBuf>,
) -> Result<PathBuf, EngineError> {
    if let Some(p) = env.filter(|v| !v.is_empty()).map(PathBuf::from) {
        if p.is_file() {
            return Ok(p);
        }
        return Err(EngineError::Backend(format!(
            "{ENV_VAR} is set to {} but there is no such file: point it at libonnxruntime.so \
             (e.g. the one in the onnxruntime Python package's capi/ folder), or unset it to \
             use the installed Python package",
            p.display()
        )));
    }
    let Some(dir) = python_package() else {
        return Err(EngineError::Backend(format!(
            "ONNX Runtime library not found: {ENV_VAR} is not set and python3 has no \
             onnxruntime package; {INSTALL_HINT}"
        )));
    };
    let capi = dir.join("capi");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&capi)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.is_file() && p.file_name().is_some_and(is_library_name))
                .collect()
        })
        .unwrap_or_default();
    // `libonnxruntime.so` before `libonnxruntime.so.1.32.0`; then by name, so the choice
    // never depends on directory order.
    found.sort_by_key(|p| (p.as_os_str().len(), p.clone()));
    found.into_iter().next().ok_or_else(|| {
        EngineError::Backend(format!(
            "the Python onnxruntime package at {} has no {}; {INSTALL_HINT}",
            dir.display(),
            Path::new("capi").join(LIBRARY_PATTERN).display()
        ))
    })
}

/// What the library is called inside the wheel, for messages.
#[cfg(target_os = "macos")]
const LIBRARY_PATTERN: &str = "libonnxruntime*.dylib";
#[cfg(windows)]
const LIBRARY_PATTERN: &str = "onnxruntime.dll";
#[cfg(not(any(target_os = "macos", windows)))]
const LIBRARY_PATTERN: &str = "libonnxruntime.so*";

/// Whether a file in the wheel's `capi/` folder is the ONNX Runtime library itself (not
/// `libonnxruntime_providers_shared.so` or the Python extension).
fn is_library_name(name: &std::ffi::OsStr) -> bool {
    let Some(n) = name.to_str() else {
        return false;
    };
    if cfg!(target_os = "macos") {
        n.starts_with("libonnxruntime.") && n.ends_with(".dylib")
    } else if cfg!(windows) {
        n.eq_ignore_ascii_case("onnxruntime.dll")
    } else {
        n == "libonnxruntime.so" || n.starts_with("libonnxruntime.so.")
    }
}

/// The installed Python `onnxruntime` package's folder, asked from `python3`.
fn python_package_dir() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))",
        ])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?;
    let p = PathBuf::from(s.trim());
    p.is_dir().then_some(p)
}

/// The process's ONNX Runtime: the library that was loaded and the one environment.
struct Runtime {
    library: PathBuf,
    env: Environment,
}

static RUNTIME: OnceLock<Result<Runtime, String>> = OnceLock::new();

/// The library this process loaded ONNX Runtime from, once a model has been loaded with
/// this backend (`None` before, or when loading it failed).
pub fn loaded_library() -> Option<&'static Path> {
    match RUNTIME.get() {
        Some(Ok(rt)) => Some(&rt.library),
        _ => None,
    }
}

/// The process-wide ONNX Runtime (library found and loaded on first use, then reused).
fn runtime() -> Result<&'static Runtime, EngineError> {
    RUNTIME
        .get_or_init(|| {
            let library = find_library().map_err(|e| e.to_string())?;
            // `ort` returns load failures (dlopen, missing symbol, too old a version) as
            // errors, but asserts on a few impossible-looking states of a foreign library:
            // catch those too, so that no library problem can take the process down.
            let built = std::panic::catch_unwind(|| start_runtime(&library));
            let env = match built {
                Ok(r) => r?,
                Err(_) => {
                    return Err(format!(
                        "loading ONNX Runtime from {} failed (ort panicked); {INSTALL_HINT}",
                        library.display()
                    ))
                }
            };
            Ok(Runtime { library, env })
        })
        .as_ref()
        .map_err(|e| EngineError::Backend(e.clone()))
}

fn start_runtime(library: &Path) -> Result<Environment, String> {
    let quiet: ort::logging::LoggerFunction = Arc::new(|_, _, _, _, _| {});
    ort::init_from(library)
        .map_err(|e| {
            format!(
                "cannot load ONNX Runtime from {}: {e}; {INSTALL_HINT}",
                library.display()
            )
        })?
        .with_name("redline")
        .with_telemetry(false)
        .with_logger(quiet)
        .build()
        .map_err(|e| format!("cannot start ONNX Runtime from {}: {e}", library.display()))
}

fn elem_of(t: TensorElementType) -> Option<ElemType> {
    match t {
        TensorElementType::Float32 => Some(ElemType::F32),
        TensorElementType::Int8 => Some(ElemType::I8),
        TensorElementType::Uint8 => Some(ElemType::U8),
        TensorElementType::Int32 => Some(ElemType::I32),
        TensorElementType::Int64 => Some(ElemType::I64),
        _ => None,
    }
}

/// Staging buffer of one input whose caller buffer may be misaligned for its element type
/// (none for 1-byte types, which are always aligned).
#[derive(Debug)]
enum Staging {
    None,
    F32(Vec<f32>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Staging {
    fn for_spec(s: &TensorSpec) -> Staging {
        let n = s.elements();
        match s.elem {
            ElemType::F32 => Staging::F32(vec![0.0; n]),
            ElemType::I32 => Staging::I32(vec![0; n]),
            ElemType::I64 => Staging::I64(vec![0; n]),
            ElemType::I8 | ElemType::U8 => Staging::None,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Staging::None => 0,
            Staging::F32(v) => std::mem::size_of_val(v.as_slice()),
            Staging::I32(v) => std::mem::size_of_val(v.as_slice()),
            Staging::I64(v) => std::mem::size_of_val(v.as_slice()),
        }
    }
}

/// A model compiled by ONNX Runtime. See the module docs for what it promises.
pub struct OrtEngine {
    session: Session,
    run_options: RunOptions<HasSelectedOutputs>,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    staging: Vec<Staging>,
    scratch: usize,
    macs: u64,
    kind: EngineKind,
}

impl fmt::Debug for OrtEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OrtEngine")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("scratch", &self.scratch)
            .field("macs", &self.macs)
            .finish_non_exhaustive()
    }
}

/// The element type and shape of a session input or output, with the names of its symbolic
/// dimensions (`""` for an unnamed one, `-1` in the shape for any dynamic one).
fn outlet_type(o: &Outlet, what: &str) -> Result<(ElemType, Vec<i64>, Vec<String>), EngineError> {
    let ValueType::Tensor {
        ty,
        shape,
        dimension_symbols,
    } = o.dtype()
    else {
        return Err(EngineError::Unsupported {
            node: o.name().to_string(),
            op: format!("graph {what}"),
            reason: format!(
                "{what} {:?} is not a tensor ({}); engines take tensors only",
                o.name(),
                o.dtype()
            ),
        });
    };
    let elem = elem_of(*ty).ok_or_else(|| EngineError::Unsupported {
        node: o.name().to_string(),
        op: format!("graph {what}"),
        reason: format!(
            "{what} {:?} has element type {ty}; engines take float32, int8, uint8, int32 and \
             int64",
            o.name()
        ),
    })?;
    let symbols = (0..shape.len())
        .map(|d| dimension_symbols.get(d).cloned().unwrap_or_default())
        .collect();
    Ok((elem, shape.to_vec(), symbols))
}

/// The fixed specs of a session's inputs or outputs; a dynamic dimension is an error.
fn specs(outlets: &[Outlet], what: &str) -> Result<Vec<TensorSpec>, EngineError> {
    let mut out = Vec::with_capacity(outlets.len());
    for o in outlets {
        let (elem, shape, symbols) = outlet_type(o, what)?;
        let mut dims = Vec::with_capacity(shape.len());
        for (d, &v) in shape.iter().enumerate() {
            let Ok(v) = usize::try_from(v) else {
                let sym = &symbols[d];
                let why = if what == "output" {
                    "stays dynamic once the inputs are fixed (a data-dependent shape?)"
                } else if sym.is_empty() {
                    "is dynamic and unnamed, so it cannot be fixed to 1"
                } else {
                    "is dynamic"
                };
                let named = if sym.is_empty() {
                    String::new()
                } else {
                    format!(" ({sym:?})")
                };
                return Err(EngineError::Invalid {
                    reason: format!(
                        "{what} {:?}: dimension {d}{named} of {shape:?} {why}; engines compile \
                         fixed shapes: export the model with static shapes (or fix them with \
                         python3 -m onnxruntime.tools.make_dynamic_shape_fixed)",
                        o.name()
                    ),
                });
            };
            dims.push(v);
        }
        out.push(TensorSpec {
            name: o.name().to_string(),
            elem,
            shape: dims,
        });
    }
    Ok(out)
}

/// The names of the inputs' named symbolic dimensions (each once, in order of appearance).
fn free_dimensions(session: &Session) -> Result<Vec<String>, EngineError> {
    let mut names: Vec<String> = Vec::new();
    for o in session.inputs() {
        let (_, shape, symbols) = outlet_type(o, "input")?;
        for (v, sym) in shape.iter().zip(symbols) {
            if *v < 0 && !sym.is_empty() && !names.contains(&sym) {
                names.push(sym);
            }
        }
    }
    Ok(names)
}

/// An ORT error while configuring a session: the library misbehaves.
fn option_err<R>(what: &'static str) -> impl Fn(ort::Error<R>) -> EngineError {
    move |e| EngineError::Backend(format!("ONNX Runtime rejected session option {what}: {e}"))
}

fn builder(
    env: &Environment,
    opts: &OrtOptions,
    free_dims: &[String],
) -> Result<SessionBuilder, EngineError> {
    let mut b = Session::builder(env)
        .map_err(|e| EngineError::Backend(format!("cannot create an ONNX Runtime session: {e}")))?
        .with_optimization_level(GraphOptimizationLevel::All)
        .map_err(option_err("graph optimisation level"))?
        .with_intra_threads(opts.threads.max(1))
        .map_err(option_err("intra-op threads"))?
        .with_inter_threads(1)
        .map_err(option_err("inter-op threads"))?
        .with_parallel_execution(false)
        .map_err(option_err("sequential execution"))?
        .with_log_level(LogLevel::Fatal)
        .map_err(option_err("log level"))?
        .with_config_entry(
            "session.qdqisint8allowed",
            if opts.qdq_int8_allowed { "1" } else { "0" },
        )
        .map_err(option_err("session.qdqisint8allowed"))?
        .with_config_entry(
            "session.force_spinning_stop",
            if opts.spin_after_run { "0" } else { "1" },
        )
        .map_err(option_err("session.force_spinning_stop"))?;
    if let Some(t) = &opts.tensorrt {
        b = with_tensorrt(b, t)?;
    }
    for name in free_dims {
        b = b
            .with_dimension_override(name, 1)
            .map_err(option_err("free dimension override"))?;
    }
    Ok(b)
}

/// Registers the TensorRT provider (failure to register is an error, never a silent CPU
/// session) and forbids falling back to the CPU for any node.
#[cfg(feature = "tensorrt")]
fn with_tensorrt(
    b: SessionBuilder,
    t: &super::tensorrt::TensorRtProvider,
) -> Result<SessionBuilder, EngineError> {
    use super::tensorrt::Precision;
    let dir = t.cache_dir.display().to_string();
    let ep = ort::ep::TensorRT::default()
        .with_device_id(t.device)
        .with_int8(t.precision == Precision::Int8)
        .with_fp16(t.precision != Precision::Fp32)
        .with_engine_cache(true)
        .with_engine_cache_path(&dir)
        .with_timing_cache(true)
        .with_timing_cache_path(&dir)
        .build()
        .error_on_failure();
    b.with_config_entry("session.disable_cpu_ep_fallback", "1")
        .map_err(option_err("session.disable_cpu_ep_fallback"))?
        .with_execution_providers([ep])
        .map_err(|e| {
            EngineError::Backend(format!(
                "ONNX Runtime could not set up its TensorRT provider: {e}"
            ))
        })
}

#[cfg(not(feature = "tensorrt"))]
fn with_tensorrt(
    _: SessionBuilder,
    _: &super::tensorrt::TensorRtProvider,
) -> Result<SessionBuilder, EngineError> {
    Err(EngineError::Backend(
        "this redline was built without TensorRT support: rebuild with `--features tensorrt`"
            .into(),
    ))
}

/// An owned ORT tensor of `spec`'s type and shape, allocated once for ORT to write into.
fn output_tensor(session: &Session, spec: &TensorSpec) -> Result<DynValue, EngineError> {
    fn new<T: PrimitiveTensorElementType + fmt::Debug>(
        session: &Session,
        shape: &[usize],
    ) -> ort::Result<DynValue> {
        Ok(Tensor::<T>::new(session.allocator(), shape.to_vec())?.into_dyn())
    }
    let shape = spec.shape.as_slice();
    match spec.elem {
        ElemType::F32 => new::<f32>(session, shape),
        ElemType::I8 => new::<i8>(session, shape),
        ElemType::U8 => new::<u8>(session, shape),
        ElemType::I32 => new::<i32>(session, shape),
        ElemType::I64 => new::<i64>(session, shape),
    }
    .map_err(|e| {
        EngineError::Backend(format!(
            "ONNX Runtime cannot allocate output {}: {e}",
            spec.name
        ))
    })
}

impl OrtEngine {
    /// Loads the library (once per process) and compiles the model at `path` into an ONNX
    /// Runtime session with `opts`. Named symbolic input dimensions are fixed to 1; see the
    /// module docs for everything it checks.
    pub fn load(path: &Path, opts: &OrtOptions) -> Result<OrtEngine, EngineError> {
        // Read errors first, so a missing file is an Io error, not ORT's message about it.
        let bytes = std::fs::read(path).map_err(|source| EngineError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&bytes, path, opts)
    }

    /// Compiles a model from the bytes of an `.onnx` file (`name` is used in messages), as
    /// [`OrtEngine::load`] does. Models with external data files must be loaded by path.
    pub fn from_bytes(
        bytes: &[u8],
        name: &Path,
        opts: &OrtOptions,
    ) -> Result<OrtEngine, EngineError> {
        let path = name;
        let env = &runtime()?.env;
        let commit = |free_dims: &[String]| {
            builder(env, opts, free_dims)?
                .commit_from_memory(bytes)
                .map_err(|e| EngineError::Parse {
                    path: path.to_path_buf(),
                    reason: format!("ONNX Runtime cannot load it: {e}"),
                })
        };
        let mut session = commit(&[])?;
        let free_dims = free_dimensions(&session)?;
        if !free_dims.is_empty() {
            session = commit(&free_dims)?;
        }
        let inputs = specs(session.inputs(), "input")?;
        let outputs = specs(session.outputs(), "output")?;
        let mut selector = OutputSelector::no_default();
        let mut scratch = 0;
        for spec in &outputs {
            let value = output_tensor(&session, spec)?;
            scratch += spec.byte_len();
            selector = selector
                .with(spec.name.clone())
                .preallocate(spec.name.clone(), value);
        }
        let run_options = RunOptions::new()
            .map_err(|e| EngineError::Backend(format!("ONNX Runtime run options: {e}")))?
            .with_outputs(selector);
        let staging: Vec<Staging> = inputs.iter().map(Staging::for_spec).collect();
        scratch += staging.iter().map(Staging::bytes).sum::<usize>();
        Ok(OrtEngine {
            session,
            run_options,
            inputs,
            outputs,
            staging,
            scratch,
            macs: 0,
            kind: if opts.tensorrt.is_some() {
                EngineKind::TensorRt
            } else {
                EngineKind::OnnxRuntime
            },
        })
    }

    /// Sets the multiply-accumulates that [`Engine::macs`] reports. ORT cannot count them:
    /// they are filled by the caller from the ONNX graph (the native importer counts them).
    pub fn set_macs(&mut self, macs: u64) {
        self.macs = macs;
    }
}

/// A view of `src` as `T`s when it is aligned for `T` (and the target is little-endian, the
/// byte order of the engine buffers); otherwise `src` decoded into `staging`.
fn view_or_copy<'a, T: bytemuck::Pod, const N: usize>(
    src: &'a [u8],
    staging: &'a mut [T],
    decode: fn([u8; N]) -> T,
) -> &'a [T] {
    if cfg!(target_endian = "little") {
        if let Ok(v) = bytemuck::try_cast_slice::<u8, T>(src) {
            return v;
        }
    }
    for (d, c) in staging.iter_mut().zip(src.chunks_exact(N)) {
        let mut b = [0u8; N];
        b.copy_from_slice(c);
        *d = decode(b);
    }
    staging
}

fn tensor_view<'a, T: PrimitiveTensorElementType + fmt::Debug + Clone + 'static>(
    shape: &'a [usize],
    data: &'a [T],
) -> Result<SessionInputValue<'a>, EngineError> {
    TensorRef::from_array_view((shape, data))
        .map(SessionInputValue::from)
        .map_err(|_| EngineError::Run("ONNX Runtime rejected an input tensor"))
}

fn copy_out<T: PrimitiveTensorElementType + fmt::Debug + Copy, const N: usize>(
    v: &DynValue,
    out: &mut [u8],
    encode: fn(T) -> [u8; N],
) -> Result<(), EngineError> {
    let (_, data) = v
        .try_extract_tensor::<T>()
        .map_err(|_| EngineError::Run("ONNX Runtime returned an output of another type"))?;
    if data.len() * N != out.len() {
        return Err(EngineError::Run(
            "ONNX Runtime returned an output of another size",
        ));
    }
    for (c, &x) in out.chunks_exact_mut(N).zip(data) {
        c.copy_from_slice(&encode(x));
    }
    Ok(())
}

impl Engine for OrtEngine {
    fn kind(&self) -> EngineKind {
        self.kind
    }

    fn inputs(&self) -> &[TensorSpec] {
        &self.inputs
    }

    fn outputs(&self) -> &[TensorSpec] {
        &self.outputs
    }

    fn macs(&self) -> u64 {
        self.macs
    }

    fn scratch_bytes(&self) -> usize {
        self.scratch
    }

    fn run(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        _lanes: &dyn Lanes,
    ) -> Result<(), EngineError> {
        check_buffers(&self.inputs, &self.outputs, inputs, outputs)?;
        let mut values: Vec<SessionInputValue<'_>> = Vec::with_capacity(self.inputs.len());
        for ((spec, st), &src) in self.inputs.iter().zip(&mut self.staging).zip(inputs) {
            let shape = spec.shape.as_slice();
            let v = match (spec.elem, st) {
                (ElemType::U8, _) => tensor_view::<u8>(shape, src)?,
                (ElemType::I8, _) => tensor_view::<i8>(shape, bytemuck::cast_slice(src))?,
                (ElemType::F32, Staging::F32(s)) => {
                    tensor_view(shape, view_or_copy(src, s, f32::from_le_bytes))?
                }
                (ElemType::I32, Staging::I32(s)) => {
                    tensor_view(shape, view_or_copy(src, s, i32::from_le_bytes))?
                }
                (ElemType::I64, Staging::I64(s)) => {
                    tensor_view(shape, view_or_copy(src, s, i64::from_le_bytes))?
                }
                _ => return Err(EngineError::Run("staging buffer of another type")),
            };
            values.push(v);
        }
        let result = self
            .session
            .run_with_options(values.as_slice(), &self.run_options)
            .map_err(|_| EngineError::Run("ONNX Runtime failed to run the model"))?;
        if result.len() != self.outputs.len() {
            return Err(EngineError::Run(
                "ONNX Runtime returned another number of outputs",
            ));
        }
        for (j, spec) in self.outputs.iter().enumerate() {
            let v = &result[j];
            let out = &mut *outputs[j];
            match spec.elem {
                ElemType::F32 => copy_out::<f32, 4>(v, out, f32::to_le_bytes)?,
                ElemType::I8 => copy_out::<i8, 1>(v, out, i8::to_le_bytes)?,
                ElemType::U8 => copy_out::<u8, 1>(v, out, |x| [x])?,
                ElemType::I32 => copy_out::<i32, 4>(v, out, i32::to_le_bytes)?,
                ElemType::I64 => copy_out::<i64, 8>(v, out, i64::to_le_bytes)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
