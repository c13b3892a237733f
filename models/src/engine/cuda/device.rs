//! The CUDA engine on a device (feature `cuda`): the driver and NVRTC through cudarc's
//! dynamically loaded bindings, probed before first use.
//!
//! What a run does: copy the caller's inputs into the pinned staging buffer, then on the
//! engine's stream — upload the input slots (one copy), run the plan's launches, download
//! the output slots (one copy) — and wait for the stream with the context's *blocking*
//! synchronisation (the calling thread sleeps instead of spinning), then copy the outputs
//! out of the pinned buffer. With CUDA graphs (the default) the stream work is captured once
//! at load and every run is one `cuGraphLaunch`. Nothing is allocated per run, on the host
//! or the device.

use super::launch::{Kernel, LaunchPlan};
use super::{CudaOptions, DeviceInfo, KERNELS_CU};
use crate::engine::EngineError;
use crate::onnx::Lowered;
use cudarc::driver::{result as cu, sys};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Mutex, OnceLock};

fn backend(what: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Backend(format!("CUDA: {what}: {e}"))
}

/// Checks that the driver library loads and a device exists (no panic when it does not).
fn driver_ready() -> Result<(), EngineError> {
    // SAFETY: only tries to dlopen the driver library by its usual names.
    if !unsafe { sys::is_culib_present() } {
        return Err(EngineError::Backend(
            "CUDA: no NVIDIA driver library (libcuda.so.1) could be loaded: this machine has \
             no usable NVIDIA driver; run on a machine with a GPU, or use engine = \"native\""
                .into(),
        ));
    }
    cu::init().map_err(|e| backend("cuInit failed (is a GPU visible to this process?)", e))?;
    let n = cu::device::get_count().map_err(|e| backend("cannot count devices", e))?;
    if n == 0 {
        return Err(EngineError::Backend(
            "CUDA: the driver loaded but reports no device (CUDA_VISIBLE_DEVICES?)".into(),
        ));
    }
    Ok(())
}

fn nvrtc_ready() -> Result<(), EngineError> {
    // SAFETY: only tries to dlopen the NVRTC library by its usual names.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(EngineError::Backend(
            "CUDA: NVRTC (libnvrtc.so) could not be loaded; it compiles redline's kernels at \
             start-up. Install the CUDA toolkit or `pip install nvidia-cuda-nvrtc-cu12` and put \
             the folder holding libnvrtc.so* on LD_LIBRARY_PATH"
                .into(),
        ));
    }
    Ok(())
}

fn attribute(dev: sys::CUdevice, a: sys::CUdevice_attribute) -> Result<i32, EngineError> {
    // SAFETY: `dev` came from cuDeviceGet after a successful cuInit.
    unsafe { cu::device::get_attribute(dev, a) }.map_err(|e| backend("device attribute", e))
}

/// What [`super::probe`] reports.
pub(super) fn probe(ordinal: usize) -> Result<DeviceInfo, EngineError> {
    driver_ready()?;
    let dev =
        cu::device::get(ordinal as i32).map_err(|e| backend(&format!("no device {ordinal}"), e))?;
    let name = cu::device::get_name(dev).map_err(|e| backend("device name", e))?;
    use sys::CUdevice_attribute as A;
    let major = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attribute(dev, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let sms = attribute(dev, A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
    // SAFETY: as above.
    let memory = unsafe { cu::device::total_mem(dev) }.map_err(|e| backend("memory", e))?;
    let mut driver = 0;
    // SAFETY: writes one int.
    unsafe { sys::cuDriverGetVersion(&mut driver) }
        .result()
        .map_err(|e| backend("driver version", e))?;
    Ok(DeviceInfo {
        ordinal,
        name,
        compute_capability: (major, minor),
        multiprocessors: sms,
        memory_bytes: memory,
        driver_version: driver,
    })
}

/// How `run` waits for the GPU: `REDLINE_CUDA_SYNC` = `block` (default: the thread sleeps
/// until the driver wakes it, so no lane spins), `spin` (lowest latency, burns the thread)
/// or `yield`.
pub(super) fn sync_mode() -> &'static str {
    match std::env::var("REDLINE_CUDA_SYNC").as_deref() {
        Ok("spin") => "spin",
        Ok("yield") => "yield",
        _ => "block",
    }
}

/// NVRTC's version (major, minor).
pub(super) fn nvrtc_version() -> Result<(i32, i32), EngineError> {
    nvrtc_ready()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: writes two ints; the library was found above.
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| backend("NVRTC version", e))?;
    Ok((major, minor))
}

/// Compiles kernels.cu to PTX for `compute_{cc}` (once per process and architecture).
pub(super) fn compile_ptx(cc: u32) -> Result<String, EngineError> {
    static CACHE: OnceLock<Mutex<HashMap<u32, String>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(p) = cache
        .lock()
        .map_err(|_| backend("PTX cache", "poisoned"))?
        .get(&cc)
    {
        return Ok(p.clone());
    }
    nvrtc_ready()?;
    let opts = cudarc::nvrtc::CompileOptions {
        ftz: Some(false),
        prec_sqrt: Some(true),
        prec_div: Some(true),
        fmad: Some(false),
        options: vec![format!("--gpu-architecture=compute_{cc}")],
        name: Some("redline_kernels.cu".into()),
        ..Default::default()
    };
    let ptx = cudarc::nvrtc::compile_ptx_with_opts(KERNELS_CU, opts)
        .map_err(|e| {
            backend(
                &format!("NVRTC could not compile the kernels for compute_{cc}"),
                e,
            )
        })?
        .to_src();
    cache
        .lock()
        .map_err(|_| backend("PTX cache", "poisoned"))?
        .insert(cc, ptx.clone());
    Ok(ptx)
}

/// A loaded module's kernels (function handles of the primary context), indexed by
/// `Kernel as usize` (the order of [`Kernel::ALL`]).
#[derive(Clone)]
struct Loaded(Vec<sys::CUfunction>);

// SAFETY: function handles are plain driver handles, valid on any thread of the process while
// the module is loaded; the module is never unloaded (see `kernels`).
unsafe impl Send for Loaded {}

/// The kernels on device `ordinal` (current context = its primary context): compiled and
/// loaded once per process and device. The module stays loaded for the life of the process,
/// and one extra retain keeps the primary context (and so the module) alive when every
/// engine is dropped: loading a PTX module JIT-compiles it, which must not be paid per engine.
fn kernels(ordinal: usize, cc: (i32, i32)) -> Result<Vec<sys::CUfunction>, EngineError> {
    static LOADED: OnceLock<Mutex<HashMap<usize, Loaded>>> = OnceLock::new();
    let map = LOADED.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = map
        .lock()
        .map_err(|_| backend("module cache", "poisoned"))?;
    if let Some(l) = map.get(&ordinal) {
        return Ok(l.0.clone());
    }
    let ptx = compile_ptx((cc.0 * 10 + cc.1) as u32)?;
    let image = CString::new(ptx).map_err(|e| backend("PTX", e))?;
    let dev = cu::device::get(ordinal as i32).map_err(|e| backend("device", e))?;
    // SAFETY: `dev` is valid; this retain is deliberately never released (see above).
    unsafe { cu::primary_ctx::retain(dev) }.map_err(|e| backend("context", e))?;
    // SAFETY: a NUL-terminated PTX image, loaded into the current (primary) context.
    let module = unsafe { cu::module::load_data(image.as_ptr().cast()) }.map_err(|e| {
        backend(
            "the driver could not load the PTX (an NVRTC newer than the driver? use the \
             NVRTC of the driver's CUDA version or older)",
            e,
        )
    })?;
    let mut functions = Vec::new();
    for k in Kernel::ALL {
        let name = CString::new(k.name()).map_err(|e| backend("kernel name", e))?;
        // SAFETY: the module is loaded; the name is NUL-terminated.
        let f = unsafe { cu::module::get_function(module, name) }
            .map_err(|e| backend(&format!("kernel {}", k.name()), e))?;
        debug_assert_eq!(k as usize, functions.len());
        functions.push(f);
    }
    map.insert(ordinal, Loaded(functions.clone()));
    Ok(functions)
}

/// A model on a GPU: its launch plan, relocated into the device regions, and the device
/// objects that run it. `no_device.rs` has the same interface for builds without CUDA.
#[derive(Debug)]
pub(super) struct Gpu {
    plan: LaunchPlan,
    device: Device,
}

impl Gpu {
    /// Plans `model` for the GPU `info` describes (tensor cores from sm_80 when
    /// `opts.tensor_cores`) and loads it there.
    pub(super) fn new(
        model: &Lowered,
        info: DeviceInfo,
        opts: &CudaOptions,
    ) -> Result<Gpu, EngineError> {
        let tensor_cores = opts.tensor_cores && info.compute_capability.0 >= 8;
        let mut plan = LaunchPlan::new(model, tensor_cores)?;
        let device = Device::new(&mut plan, info, opts)?;
        Ok(Gpu { plan, device })
    }

    pub(super) fn info(&self) -> &DeviceInfo {
        &self.device.info
    }

    pub(super) fn uses_graph(&self) -> bool {
        self.device.uses_graph()
    }

    pub(super) fn launches(&self) -> usize {
        self.plan.launches.len()
    }

    /// Device bytes (frame region + constants) and pinned host bytes.
    pub(super) fn bytes(&self) -> usize {
        self.plan.frame_bytes + self.plan.consts.len() + self.plan.host_bytes
    }

    pub(super) fn input_staging(&mut self, i: usize) -> Option<&mut [u8]> {
        (i < self.plan.inputs.len()).then(|| self.device.staging_mut(&self.plan, i, true))
    }

    pub(super) fn output_staging(&self, j: usize) -> Option<&[u8]> {
        (j < self.plan.outputs.len()).then(|| self.device.staging(&self.plan, j))
    }

    pub(super) fn run(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        self.device.run(&self.plan, inputs, outputs)
    }

    pub(super) fn run_staged(&mut self) -> Result<(), EngineError> {
        self.device.run_staged(&self.plan)
    }

    /// `(what, mean ms)`: the upload, every launch (its program step and kernel), the
    /// download.
    pub(super) fn profile(&mut self, reps: usize) -> Result<Vec<(String, f32)>, EngineError> {
        let ms = self.device.profile(&self.plan, reps)?;
        let mut names = vec!["upload (host to device)".to_string()];
        for l in &self.plan.launches {
            let step = self.plan.step_names.get(l.step).map_or("?", String::as_str);
            names.push(format!("{step} [{}]", l.kernel.name()));
        }
        names.push("download (device to host)".to_string());
        Ok(names.into_iter().zip(ms).collect())
    }
}

/// The device objects of one engine. Raw driver handles: they are valid on any thread once
/// the context is made current there, which every entry point does first.
#[derive(Debug)]
struct Device {
    ctx: sys::CUcontext,
    dev: sys::CUdevice,
    stream: sys::CUstream,
    /// Indexed by `Kernel as usize`.
    functions: Vec<sys::CUfunction>,
    frame: sys::CUdeviceptr,
    consts: sys::CUdeviceptr,
    frame_in: sys::CUdeviceptr,
    frame_out: sys::CUdeviceptr,
    host: *mut u8,
    host_bytes: usize,
    host_in_bytes: usize,
    graph: Option<(sys::CUgraph, sys::CUgraphExec)>,
    info: DeviceInfo,
}

// SAFETY: CUDA driver handles are not tied to a thread (the context is made current on the
// calling thread before each use), and the pinned buffer is owned by this struct alone.
unsafe impl Send for Device {}

impl Device {
    /// Creates the context, compiles and loads the kernels, allocates the two device regions
    /// and the pinned staging buffer, uploads the constants, relocates `plan` and, with
    /// graphs, captures the frame's stream work.
    fn new(
        plan: &mut LaunchPlan,
        info: DeviceInfo,
        opts: &CudaOptions,
    ) -> Result<Device, EngineError> {
        let dev = cu::device::get(opts.device as i32).map_err(|e| backend("device", e))?;
        // How a thread waits for the stream (REDLINE_CUDA_SYNC, process-wide: it is a flag
        // of the primary context). Fails harmlessly when the context is already active with
        // other flags (then those stay).
        let flag = match sync_mode() {
            "spin" => sys::CUctx_flags::CU_CTX_SCHED_SPIN,
            "yield" => sys::CUctx_flags::CU_CTX_SCHED_YIELD,
            _ => sys::CUctx_flags::CU_CTX_SCHED_BLOCKING_SYNC,
        };
        // SAFETY: `dev` is a valid device.
        let _ = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, flag as u32) };
        // SAFETY: `dev` is valid; the context is released in Drop.
        let ctx = unsafe { cu::primary_ctx::retain(dev) }.map_err(|e| backend("context", e))?;
        let mut d = Device {
            ctx,
            dev,
            stream: std::ptr::null_mut(),
            functions: Vec::new(),
            frame: 0,
            consts: 0,
            frame_in: 0,
            frame_out: 0,
            host: std::ptr::null_mut(),
            host_bytes: 0,
            host_in_bytes: 0,
            graph: None,
            info,
        };
        d.make_current()?;
        d.functions = kernels(opts.device, d.info.compute_capability)?;
        d.stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(|e| backend("stream", e))?;
        // SAFETY: plain allocations, freed in Drop.
        d.frame = unsafe { cu::malloc_sync(plan.frame_bytes.max(1)) }
            .map_err(|e| backend(&format!("allocating {} device bytes", plan.frame_bytes), e))?;
        // SAFETY: as above.
        d.consts = unsafe { cu::malloc_sync(plan.consts.len().max(1)) }
            .map_err(|e| backend("allocating the constants", e))?;
        // SAFETY: `frame` holds `frame_bytes` bytes.
        unsafe { cu::memset_d8_sync(d.frame, 0, plan.frame_bytes.max(1)) }
            .map_err(|e| backend("clearing the frame region", e))?;
        if !plan.consts.is_empty() {
            // SAFETY: `consts` holds `consts.len()` bytes.
            unsafe { cu::memcpy_htod_sync(d.consts, &plan.consts) }
                .map_err(|e| backend("uploading the constants", e))?;
        }
        d.host_bytes = plan.host_bytes.max(1);
        d.host_in_bytes = plan.host_in_bytes;
        // Pinned, not write-combined: the output half is read back by the CPU.
        // SAFETY: freed in Drop.
        d.host = unsafe { cu::malloc_host(d.host_bytes, 0) }
            .map_err(|e| backend("allocating pinned host memory", e))?
            .cast();
        // SAFETY: `host` holds `host_bytes` bytes.
        unsafe { std::ptr::write_bytes(d.host, 0, d.host_bytes) };
        let first_in = plan.inputs.first().map(|s| s.frame_offset);
        let first_out = plan.outputs.first().map(|s| s.frame_offset);
        d.frame_in = d.frame + first_in.unwrap_or(plan.arena_bytes) as u64;
        d.frame_out = d.frame + first_out.unwrap_or(plan.frame_bytes) as u64;
        plan.relocate(d.frame, d.consts);
        if opts.graphs {
            let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
            // SAFETY: the stream was created above and is idle.
            unsafe { cu::stream::begin_capture(d.stream, mode) }
                .map_err(|e| backend("begin graph capture", e))?;
            let enq = d.enqueue(plan);
            // SAFETY: the stream is capturing (begun above).
            let graph = unsafe { cu::stream::end_capture(d.stream) };
            enq.map_err(|e| backend("capturing the frame", e))?;
            let graph = graph.map_err(|e| backend("end graph capture", e))?;
            // SAFETY: a graph just captured.
            let exec = unsafe { cu::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }
                .map_err(|e| backend("instantiating the graph", e))?;
            d.graph = Some((graph, exec));
            // SAFETY: exec and stream are valid.
            unsafe { cu::graph::upload(exec, d.stream) }.map_err(|e| backend("graph upload", e))?;
        }
        Ok(d)
    }

    fn make_current(&self) -> Result<(), EngineError> {
        // SAFETY: the context is retained for the life of `self`.
        unsafe { cu::ctx::set_current(self.ctx) }.map_err(|e| backend("set context", e))
    }

    /// The frame's stream work: upload, launches, download.
    fn enqueue(&self, plan: &LaunchPlan) -> Result<(), cu::DriverError> {
        self.enqueue_marked(plan, |_| Ok(()))
    }

    /// [`Device::enqueue`] with `mark(k)` called between the pieces of work: `0` before the
    /// upload, `1` after it, `2 + i` after launch `i`, and `launches + 2` after the
    /// download (the profiler records an event at each mark).
    fn enqueue_marked(
        &self,
        plan: &LaunchPlan,
        mut mark: impl FnMut(usize) -> Result<(), cu::DriverError>,
    ) -> Result<(), cu::DriverError> {
        mark(0)?;
        // SAFETY: the pinned buffer holds `host_bytes` bytes, inputs first; the device
        // regions were sized by the plan; the copies and launches are ordered on one stream.
        unsafe {
            if self.host_in_bytes > 0 {
                let src = std::slice::from_raw_parts(self.host, self.host_in_bytes);
                cu::memcpy_htod_async(self.frame_in, src, self.stream)?;
            }
            mark(1)?;
            for (i, l) in plan.launches.iter().enumerate() {
                let f = self.function(l.kernel);
                let mut arg = [l.params.as_ptr() as *mut c_void];
                cu::launch_kernel(f, l.grid, (l.block, 1, 1), 0, self.stream, &mut arg)?;
                mark(i + 2)?;
            }
            let out_bytes = self.host_bytes - self.host_in_bytes;
            if out_bytes > 0 && plan.outputs.iter().any(|s| s.bytes > 0) {
                let dst =
                    std::slice::from_raw_parts_mut(self.host.add(self.host_in_bytes), out_bytes);
                cu::memcpy_dtoh_async(dst, self.frame_out, self.stream)?;
            }
        }
        mark(plan.launches.len() + 2)
    }

    fn function(&self, k: Kernel) -> sys::CUfunction {
        self.functions[k as usize]
    }

    /// One frame: `inputs` into the pinned slots, the stream work, outputs back.
    fn run(
        &mut self,
        plan: &LaunchPlan,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
    ) -> Result<(), EngineError> {
        for (i, src) in inputs.iter().enumerate() {
            self.staging_mut(plan, i, true).copy_from_slice(src);
        }
        self.run_staged(plan)?;
        for (j, dst) in outputs.iter_mut().enumerate() {
            dst.copy_from_slice(self.staging(plan, j));
        }
        Ok(())
    }

    /// The stream work of one frame on what the pinned staging holds, and the wait.
    fn run_staged(&mut self, plan: &LaunchPlan) -> Result<(), EngineError> {
        self.make_current()
            .map_err(|_| EngineError::Run("CUDA: cannot make the context current"))?;
        let r = match self.graph {
            // SAFETY: exec and stream are valid.
            Some((_, exec)) => unsafe { cu::graph::launch(exec, self.stream) },
            None => self.enqueue(plan),
        };
        r.map_err(|_| EngineError::Run("CUDA: launching the frame failed"))?;
        // SAFETY: the stream is valid.
        unsafe { cu::stream::synchronize(self.stream) }
            .map_err(|_| EngineError::Run("CUDA: the frame failed on the device"))
    }

    /// The pinned staging bytes of input `i` (`input`) or output `i`.
    fn staging_mut(&mut self, plan: &LaunchPlan, i: usize, input: bool) -> &mut [u8] {
        let s = if input {
            plan.inputs[i]
        } else {
            plan.outputs[i]
        };
        // SAFETY: the slot lies inside the pinned buffer (planned, `host_bytes` long), and
        // the device does not touch it now: every run waits for its stream before
        // returning, so no copy into or out of it is in flight; `&mut self` makes the
        // borrow exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.host.add(s.host_offset), s.bytes) }
    }

    /// The pinned staging bytes of output `j`.
    fn staging(&self, plan: &LaunchPlan, j: usize) -> &[u8] {
        let s = plan.outputs[j];
        // SAFETY: as `staging_mut`; shared borrow of `self`, no device work in flight.
        unsafe { std::slice::from_raw_parts(self.host.add(s.host_offset), s.bytes) }
    }

    /// The mean device time (ms) of the upload, of every launch of the plan and of the
    /// download, over `reps` frames run launch by launch on the stream with an event pair
    /// around each (the staged inputs as they are). Diagnostics, not the hot path: it
    /// creates and destroys its events.
    fn profile(&mut self, plan: &LaunchPlan, reps: usize) -> Result<Vec<f32>, EngineError> {
        self.make_current()?;
        let n = plan.launches.len() + 2;
        let mut events = Vec::with_capacity(n + 1);
        for _ in 0..=n {
            events.push(
                cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                    .map_err(|e| backend("event", e))?,
            );
        }
        let mut sums = vec![0f32; n];
        let run = |sums: &mut [f32]| -> Result<(), cu::DriverError> {
            self.enqueue_marked(plan, |k| {
                // SAFETY: the event and the stream are valid.
                unsafe { cu::event::record(events[k], self.stream) }
            })?;
            // SAFETY: the stream is valid; it is drained before the events are read.
            unsafe {
                cu::stream::synchronize(self.stream)?;
                for (i, s) in sums.iter_mut().enumerate() {
                    *s += cu::event::elapsed(events[i], events[i + 1])?;
                }
            }
            Ok(())
        };
        let mut result = Ok(());
        for _ in 0..reps.max(1) {
            result = run(&mut sums);
            if result.is_err() {
                break;
            }
        }
        for e in events {
            // SAFETY: created above, no longer used (the stream was drained).
            let _ = unsafe { cu::event::destroy(e) };
        }
        result.map_err(|e| backend("profiling", e))?;
        Ok(sums.into_iter().map(|s| s / reps.max(1) as f32).collect())
    }

    /// True when runs replay a captured graph.
    fn uses_graph(&self) -> bool {
        self.graph.is_some()
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every handle was created by `new` (null/0 ones are skipped) and is released
        // once; the stream is drained first so no work still uses the memory.
        unsafe {
            let _ = cu::ctx::set_current(self.ctx);
            if !self.stream.is_null() {
                let _ = cu::stream::synchronize(self.stream);
            }
            if let Some((g, e)) = self.graph.take() {
                let _ = cu::graph::exec_destroy(e);
                let _ = cu::graph::destroy(g);
            }
            if !self.host.is_null() {
                let _ = cu::free_host(self.host.cast());
            }
            if self.frame != 0 {
                let _ = cu::free_sync(self.frame);
            }
            if self.consts != 0 {
                let _ = cu::free_sync(self.consts);
            }
            if !self.stream.is_null() {
                let _ = cu::stream::destroy(self.stream);
            }
            let _ = cu::primary_ctx::release(self.dev);
        }
    }
}
