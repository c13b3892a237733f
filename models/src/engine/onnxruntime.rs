//! The `onnxruntime` backend: ONNX Runtime's CPU provider through the `ort` crate, with
//! `libonnxruntime` loaded at run time (no build-time download, nothing linked).
//!
//! # Contract
//!
//! - **Finding the library** ([`find_library`]): `ORT_DYLIB_PATH` if set (it must name an
//!   existing file); otherwise the `libonnxruntime.so*` inside the installed Python
//!   `onnxruntime` package (asked from `python3`). Nothing found is an
//!   [`EngineError::Backend`] that says how to install it. The library is loaded once per
//!   process; later loads reuse it.
//! - **Sessions** ([`OrtEngine::load`]): CPU provider only, `threads` intra-op threads, one
//!   inter-op thread, sequential execution, all graph optimisations. Symbolic dimensions
//!   of the inputs are an error naming the input (this engine, like the native one, has
//!   fixed shapes).
//! - **Runs**: inputs are copied into staging buffers allocated at load, wrapped as ORT
//!   tensors without a further copy, and the outputs are copied into the caller's slices.
//!
//! # What it cannot promise
//!
//! ONNX Runtime allocates inside every run (its output tensors), owns its own thread pool
//! (the `lanes` argument is ignored) and may pick other kernels on other CPUs: it is the
//! reference and the peer of the benchmarks, not an engine for the hot path. `macs()` is
//! what the caller set with [`OrtEngine::set_macs`] (ORT does not report it; the native
//! importer counts it), `scratch_bytes()` only counts the staging buffers.
//!
//! # Never
//!
//! Never panics on a missing or broken library or a bad model: every failure is an
//! [`EngineError`].

use super::{check_buffers, ElemType, Engine, EngineError, EngineKind, Lanes, TensorSpec};
use ort::session::builder::GraphOptimizationLevel;
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef, ValueType};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Options of an ONNX Runtime session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrtOptions {
    /// Intra-op threads (at least 1).
    pub threads: usize,
    /// `session.qdqisint8allowed`: let ORT fuse int8 QDQ groups into its integer kernels on
    /// x86 (its default there is off, which leaves many int8 QDQ operators in float).
    pub qdq_int8_allowed: bool,
}

impl Default for OrtOptions {
    fn default() -> Self {
        OrtOptions {
            threads: 1,
            qdq_int8_allowed: false,
        }
    }
}

const INSTALL_HINT: &str =
    "install ONNX Runtime's Python wheel (python3 -m pip install onnxruntime) \
     or set ORT_DYLIB_PATH=/path/to/libonnxruntime.so";

/// Where `libonnxruntime` is: `ORT_DYLIB_PATH`, else the installed Python package.
pub fn find_library() -> Result<PathBuf, EngineError> {
    let env = std::env::var_os("ORT_DYLIB_PATH").map(PathBuf::from);
    find_library_with(env, python_package_dir)
}

/// [`find_library`] with the environment value and the Python probe given (testable).
pub fn find_library_with(
    env: Option<PathBuf>,
    python_dir: impl Fn() -> Option<PathBuf>,
) -> Result<PathBuf, EngineError> {
    if let Some(p) = env {
        if p.is_file() {
            return Ok(p);
        }
        return Err(EngineError::Backend(format!(
            "ORT_DYLIB_PATH is set to {} but there is no such file: point it at \
             libonnxruntime.so (e.g. inside the onnxruntime Python package's capi/ folder)",
            p.display()
        )));
    }
    let Some(dir) = python_dir() else {
        return Err(EngineError::Backend(format!(
            "ONNX Runtime library not found: ORT_DYLIB_PATH is not set and python3 has no \
             onnxruntime package; {INSTALL_HINT}"
        )));
    };
    let capi = dir.join("capi");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&capi)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .map(|n| n.starts_with("libonnxruntime.so"))
                        .unwrap_or(false)
                })
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found.into_iter().next().ok_or_else(|| {
        EngineError::Backend(format!(
            "the Python onnxruntime package at {} has no capi/libonnxruntime.so*; {INSTALL_HINT}",
            dir.display()
        ))
    })
}

fn python_package_dir() -> Option<PathBuf> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import onnxruntime, os; print(os.path.dirname(onnxruntime.__file__))",
        ])
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

/// The process-wide ONNX Runtime environment (library loaded once).
fn environment() -> Result<&'static ort::environment::Environment, EngineError> {
    static ENV: OnceLock<Result<ort::environment::Environment, String>> = OnceLock::new();
    let r = ENV.get_or_init(|| {
        let lib = find_library().map_err(|e| e.to_string())?;
        // `ort` reports load failures as errors; a panic inside a foreign loader is caught
        // too, so that no library problem can take the process down.
        let built = std::panic::catch_unwind(|| {
            ort::init_from(&lib)
                .map_err(|e| format!("cannot load {}: {e}; {INSTALL_HINT}", lib.display()))?
                .with_name("redline")
                .build()
                .map_err(|e| format!("cannot start ONNX Runtime from {}: {e}", lib.display()))
        });
        match built {
            Ok(r) => r,
            Err(_) => Err(format!(
                "loading {} panicked; {INSTALL_HINT}",
                lib.display()
            )),
        }
    });
    r.as_ref().map_err(|e| EngineError::Backend(e.clone()))
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

/// Staging buffer of one input, typed for ORT.
#[derive(Debug)]
enum Staging {
    F32(Vec<f32>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

/// A model compiled by ONNX Runtime.
#[derive(Debug)]
pub struct OrtEngine {
    session: Session,
    inputs: Vec<TensorSpec>,
    outputs: Vec<TensorSpec>,
    staging: Vec<Staging>,
    macs: u64,
}

fn specs(outlets: &[ort::value::Outlet], what: &str) -> Result<Vec<TensorSpec>, EngineError> {
    let mut out = Vec::new();
    for o in outlets {
        let ValueType::Tensor { ty, shape, .. } = o.dtype() else {
            return Err(EngineError::Unsupported {
                node: o.name().to_string(),
                op: what.to_string(),
                reason: "not a tensor".into(),
            });
        };
        let elem = elem_of(*ty).ok_or_else(|| EngineError::Unsupported {
            node: o.name().to_string(),
            op: what.to_string(),
            reason: format!("element type {ty:?}; supported: float32, int8, uint8, int32, int64"),
        })?;
        let mut dims = Vec::new();
        for (d, &v) in shape.iter().enumerate() {
            if v < 0 {
                return Err(EngineError::Invalid {
                    reason: format!(
                        "{what} {} has a dynamic dimension {d}: engines compile fixed shapes; \
                         export the model with static shapes (or fix them with \
                         python -m onnxruntime.tools.make_dynamic_shape_fixed)",
                        o.name()
                    ),
                });
            }
            dims.push(v as usize);
        }
        out.push(TensorSpec {
            name: o.name().to_string(),
            elem,
            shape: dims,
        });
    }
    Ok(out)
}

impl OrtEngine {
    /// Loads the library (once) and compiles `path` into a session.
    pub fn load(path: &Path, opts: &OrtOptions) -> Result<OrtEngine, EngineError> {
        if !path.is_file() {
            return Err(EngineError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        let env = environment()?;
        let ort_err = |e: ort::Error| EngineError::Parse {
            path: path.to_path_buf(),
            reason: format!("ONNX Runtime: {e}"),
        };
        let session = Session::builder(env)
            .map_err(ort_err)?
            .with_optimization_level(GraphOptimizationLevel::All)
            .map_err(|e| ort_err(e.into()))?
            .with_intra_threads(opts.threads.max(1))
            .map_err(|e| ort_err(e.into()))?
            .with_inter_threads(1)
            .map_err(|e| ort_err(e.into()))?
            .with_parallel_execution(false)
            .map_err(|e| ort_err(e.into()))?
            .with_config_entry(
                "session.qdqisint8allowed",
                if opts.qdq_int8_allowed { "1" } else { "0" },
            )
            .map_err(|e| ort_err(e.into()))?
            .commit_from_file(path)
            .map_err(ort_err)?;
        let inputs = specs(session.inputs(), "input")?;
        let outputs = specs(session.outputs(), "output")?;
        let staging = inputs
            .iter()
            .map(|s| {
                let n = s.elements();
                match s.elem {
                    ElemType::F32 => Staging::F32(vec![0.0; n]),
                    ElemType::I8 => Staging::I8(vec![0; n]),
                    ElemType::U8 => Staging::U8(vec![0; n]),
                    ElemType::I32 => Staging::I32(vec![0; n]),
                    ElemType::I64 => Staging::I64(vec![0; n]),
                }
            })
            .collect();
        Ok(OrtEngine {
            session,
            inputs,
            outputs,
            staging,
            macs: 0,
        })
    }

    /// Sets the multiply-accumulates [`Engine::macs`] reports (ORT does not count them).
    pub fn set_macs(&mut self, macs: u64) {
        self.macs = macs;
    }
}

fn fill<T: Copy, const N: usize>(dst: &mut [T], src: &[u8], f: fn([u8; N]) -> T) {
    for (d, c) in dst.iter_mut().zip(src.chunks_exact(N)) {
        let mut b = [0u8; N];
        b.copy_from_slice(c);
        *d = f(b);
    }
}

fn copy_out<T: ort::value::PrimitiveTensorElementType + std::fmt::Debug, const N: usize>(
    v: &ort::value::DynValue,
    out: &mut [u8],
    f: fn(&T) -> [u8; N],
) -> Result<(), EngineError> {
    let (_, data) = v
        .try_extract_tensor::<T>()
        .map_err(|_| EngineError::Run("ONNX Runtime returned an output of another type"))?;
    if data.len() * N != out.len() {
        return Err(EngineError::Run(
            "ONNX Runtime returned an output of another size",
        ));
    }
    for (c, x) in out.chunks_exact_mut(N).zip(data) {
        c.copy_from_slice(&f(x));
    }
    Ok(())
}

impl Engine for OrtEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::OnnxRuntime
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
        self.inputs.iter().map(TensorSpec::byte_len).sum()
    }

    fn run(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        _lanes: &dyn Lanes,
    ) -> Result<(), EngineError> {
        check_buffers(&self.inputs, &self.outputs, inputs, outputs)?;
        for (st, src) in self.staging.iter_mut().zip(inputs) {
            match st {
                Staging::F32(v) => fill(v, src, f32::from_le_bytes),
                Staging::I8(v) => fill(v, src, |b: [u8; 1]| b[0] as i8),
                Staging::U8(v) => v.copy_from_slice(src),
                Staging::I32(v) => fill(v, src, i32::from_le_bytes),
                Staging::I64(v) => fill(v, src, i64::from_le_bytes),
            }
        }
        let mut values: Vec<(String, ort::session::SessionInputValue<'_>)> =
            Vec::with_capacity(self.inputs.len());
        let bad = |_| EngineError::Run("ONNX Runtime rejected an input tensor");
        for (spec, st) in self.inputs.iter().zip(&self.staging) {
            let shape = spec.shape.clone();
            let v: ort::session::SessionInputValue<'_> = match st {
                Staging::F32(v) => TensorRef::from_array_view((shape, v.as_slice()))
                    .map_err(bad)?
                    .into(),
                Staging::I8(v) => TensorRef::from_array_view((shape, v.as_slice()))
                    .map_err(bad)?
                    .into(),
                Staging::U8(v) => TensorRef::from_array_view((shape, v.as_slice()))
                    .map_err(bad)?
                    .into(),
                Staging::I32(v) => TensorRef::from_array_view((shape, v.as_slice()))
                    .map_err(bad)?
                    .into(),
                Staging::I64(v) => TensorRef::from_array_view((shape, v.as_slice()))
                    .map_err(bad)?
                    .into(),
            };
            values.push((spec.name.clone(), v));
        }
        let result = self
            .session
            .run(values)
            .map_err(|_| EngineError::Run("ONNX Runtime failed to run the model"))?;
        for (j, spec) in self.outputs.iter().enumerate() {
            let v = &result[j];
            let out = &mut *outputs[j];
            match spec.elem {
                ElemType::F32 => copy_out::<f32, 4>(v, out, |x| x.to_le_bytes())?,
                ElemType::I8 => copy_out::<i8, 1>(v, out, |x| [*x as u8])?,
                ElemType::U8 => copy_out::<u8, 1>(v, out, |x| [*x])?,
                ElemType::I32 => copy_out::<i32, 4>(v, out, |x| x.to_le_bytes())?,
                ElemType::I64 => copy_out::<i64, 8>(v, out, |x| x.to_le_bytes())?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ort_dylib_path_is_named() {
        let e = find_library_with(
            Some(PathBuf::from("/nonexistent/libonnxruntime.so")),
            || None,
        )
        .unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("ORT_DYLIB_PATH") && m.contains("/nonexistent/libonnxruntime.so"),
            "{m}"
        );
    }

    #[test]
    fn nothing_found_says_how_to_install() {
        let e = find_library_with(None, || None).unwrap_err();
        assert!(e.to_string().contains("pip install onnxruntime"), "{e}");
        let dir = std::env::temp_dir().join("redline-ort-empty-pkg");
        std::fs::create_dir_all(dir.join("capi")).unwrap();
        let e = find_library_with(None, || Some(dir.clone())).unwrap_err();
        assert!(e.to_string().contains("no capi/libonnxruntime.so"), "{e}");
    }

    #[test]
    fn an_existing_env_path_wins() {
        let f = std::env::temp_dir().join("redline-ort-fake.so");
        std::fs::write(&f, b"x").unwrap();
        assert_eq!(find_library_with(Some(f.clone()), || None).unwrap(), f);
    }
}
