//! The launch plan, checked on the CPU (no GPU needed): every launch's pointers fall inside
//! their region with room for what the kernel touches, launches follow step order, the
//! staging slots do not overlap the arena, and the parameter structs have the layout
//! kernels.cu expects.

use super::launch::*;
use std::mem::{align_of, offset_of, size_of};

#[test]
fn parameter_structs_match_the_cuda_layout() {
    // C layout of kernels.cu's structs (pointers first, then 4-byte fields, 8-byte aligned).
    assert_eq!(size_of::<Win>(), 48);
    assert_eq!(offset_of!(ConvP, win), 56);
    assert_eq!(offset_of!(ConvP, in_c), 104);
    // 11 ints after the window; 4 bytes of tail padding.
    assert_eq!(size_of::<ConvP>(), 152);
    assert_eq!(size_of::<FBinP>(), 24 + 24);
    assert_eq!(size_of::<FUnP>(), 16 + 16);
    // 4 bytes of tail padding.
    assert_eq!(size_of::<FGapP>(), 16 + 16);
    assert_eq!(size_of::<CopyP>(), 32);
    assert_eq!(size_of::<QuantP>(), 32);
    assert_eq!(size_of::<LutP>(), 32);
    assert_eq!(offset_of!(PoolP, win), 16);
    assert_eq!(offset_of!(PoolP, vec), 104);
    assert_eq!(offset_of!(PoolP, stored_zp), 116);
    // 4 bytes of tail padding to the 8-byte alignment, in C as in Rust.
    assert_eq!(size_of::<PoolP>(), 120);
    assert_eq!(offset_of!(BinP, shape), 24 + 17 * 4);
    // 4 bytes of tail padding: the struct is 8-aligned (its pointers), in C as in Rust.
    assert_eq!(size_of::<BinP>(), 24 + 17 * 4 + 3 * 32 + 4);
    assert_eq!(size_of::<TransP>(), 16 + 8 + 64);
    assert_eq!(size_of::<CatP>(), 40);
    assert_eq!(size_of::<PhaseP>(), 16 + 32);
    // 10 ints, the two scales, the clamp: no padding (88 is 8-aligned).
    assert_eq!(size_of::<ResizeP>(), 32 + 40 + 8 + 8);
    assert_eq!(size_of::<DeconvP>(), 16 + 12 * 4);
    assert_eq!(size_of::<PadAnyP>(), 24 + 16 + 3 * 32);
    assert!(
        super::KERNELS_CU.contains(&format!("#define TRANS_RUN {TRANS_RUN}\n")),
        "launch.rs TRANS_RUN must equal kernels.cu's"
    );
    assert!(
        super::KERNELS_CU.contains(&format!("#define GAP_BLOCK {GAP_BLOCK}\n")),
        "launch.rs GAP_BLOCK must equal kernels.cu's"
    );
    // The device keeps its function handles indexed by `Kernel as usize`.
    for (i, k) in Kernel::ALL.iter().enumerate() {
        assert_eq!(*k as usize, i, "{}", k.name());
    }
    for a in [
        align_of::<ConvP>(),
        align_of::<CopyP>(),
        align_of::<PoolP>(),
        align_of::<BinP>(),
        align_of::<ResizeP>(),
    ] {
        assert_eq!(a, 8);
    }
}

/// Bytes a launch writes through its output pointer `y`: (offset of the pointer, extent).
fn written(l: &Launch) -> (u64, usize) {
    let px = |w: &Win| w.out_h as usize * w.out_w as usize;
    match l.params {
        Params::Conv(p) => (
            p.y,
            p.batch as usize * px(&p.win) * p.out_c as usize * if p.out_f32 == 1 { 4 } else { 1 },
        ),
        Params::Copy(p) => (p.y, p.n as usize * if p.mode == 2 { 4 } else { 1 }),
        Params::Quant(p) => (p.y, p.n as usize),
        Params::Lut(p) => (p.y, p.n as usize),
        Params::Pool(p) if l.kernel == Kernel::FloatMaxPool => {
            (p.y, p.batch as usize * px(&p.win) * p.c as usize * 4)
        }
        Params::Pool(p) => (p.y, p.batch as usize * px(&p.win) * p.c as usize),
        Params::Bin(p) => (p.y, p.n as usize),
        Params::Trans(p) => (p.y, p.n as usize),
        Params::Cat(p) => (
            p.y,
            (p.outer as usize).saturating_sub(1) * p.block as usize + (p.col + p.inner) as usize,
        ),
        Params::Phase(p) => {
            let (dh, dw) = (p.dh as usize, p.dw as usize);
            let (h, w) = (p.h as usize, p.w as usize);
            let n = if p.split == 1 {
                dh * dw * h.div_ceil(dh) * w.div_ceil(dw)
            } else {
                h * w
            };
            (p.y, p.batch as usize * n * p.c as usize)
        }
        Params::Resize(p) => (p.y, (p.batch * p.out_h * p.out_w * p.c) as usize),
        Params::Pad(p) => (p.y, p.pixels as usize * p.c_out as usize),
        Params::Deconv(p) => (p.y, (p.batch * p.out_h * p.out_w * p.c) as usize),
        Params::PadAny(p) => (p.y, (p.n * p.elem) as usize),
        Params::FBin(p) => (p.y, p.n as usize * 4),
        Params::FUn(p) => (p.y, p.n as usize * 4),
        Params::FGap(p) => (p.y, p.n as usize * 4),
    }
}

/// The native importer's lowering of a model file's bytes.
fn lowered(bytes: &[u8], name: &str) -> crate::onnx::Lowered {
    let g = crate::onnx::graph::OnnxGraph::parse(bytes, std::path::Path::new(name)).unwrap();
    crate::onnx::lower_graph(&g).unwrap()
}

fn check_plan(bytes: &[u8], name: &str) -> LaunchPlan {
    let l = lowered(bytes, name);
    let mut plan = LaunchPlan::new(&l, true).unwrap();
    assert!(plan.arena_bytes >= l.program.arena_bytes);
    // Staging slots: after the arena, disjoint, inside the frame region and the host buffer.
    let mut end = plan.arena_bytes;
    for s in plan.inputs.iter().chain(&plan.outputs) {
        assert!(s.frame_offset >= end, "{name}: slot overlaps");
        end = s.frame_offset + s.bytes;
        assert!(s.host_offset + s.bytes <= plan.host_bytes);
    }
    assert!(end <= plan.frame_bytes);
    // Launches in step order; every write lands exactly on its step's destination buffer
    // (or staging slot) and fits it; every pointer is inside its region.
    let mut last = 0;
    for la in &plan.launches {
        assert!(la.step >= last, "{name}: launches out of step order");
        last = la.step;
        let (y, n) = written(la);
        let (region, off) = Addr::decode(y).expect("output pointer");
        if region == Region::Scratch {
            assert!(
                off + n <= plan.scratch_bytes,
                "{name}: step {} overruns the scratch",
                la.step
            );
            continue;
        }
        assert_eq!(
            region,
            Region::Frame,
            "{name}: step {} writes a constant",
            la.step
        );
        assert!(
            off + n <= plan.frame_bytes,
            "{name}: step {} writes past the frame",
            la.step
        );
        if off < plan.arena_bytes {
            let live = l.program.buffers.iter().any(|b| {
                b.offset == off && n <= b.bytes && b.first <= la.step && la.step <= b.last
            });
            assert!(live, "{name}: step {} writes no buffer live at it", la.step);
        }
        let mut params = la.params;
        for &p in params.pointers_mut().iter() {
            match Addr::decode(p) {
                Some((Region::Frame, o)) => assert!(o < plan.frame_bytes),
                Some((Region::Const, o)) => assert!(o < plan.consts.len()),
                Some((Region::Scratch, o)) => assert!(o < plan.scratch_bytes),
                None => assert_eq!(p, 0),
            }
        }
        assert!(la.grid.0 >= 1 && la.block >= 1);
    }
    // Relocation adds the bases and leaves null pointers null.
    let before: Vec<Vec<u64>> = plan
        .launches
        .iter()
        .map(|l| l.params.clone().pointers_mut().to_vec())
        .collect();
    plan.relocate(0x1000_0000, 0x2000_0000);
    for (l, b) in plan.launches.iter().zip(before) {
        let mut p = l.params;
        for (&after, before) in p.pointers_mut().iter().zip(b) {
            match Addr::decode(before) {
                Some((Region::Frame, o)) => assert_eq!(after, 0x1000_0000 + o as u64),
                Some((Region::Const, o)) => assert_eq!(after, 0x2000_0000 + o as u64),
                Some((Region::Scratch, o)) => {
                    assert_eq!(after, 0x1000_0000 + (plan.scratch_offset + o) as u64)
                }
                None => assert_eq!(after, 0),
            }
        }
    }
    plan
}

#[test]
fn the_builtin_models_plan_into_their_regions() {
    use crate::export::builtin::{BACKBONE, DET_HEAD, SEG_HEAD};
    for (bytes, name) in [
        (BACKBONE, "backbone.onnx"),
        (DET_HEAD, "det_head.onnx"),
        (SEG_HEAD, "seg_head.onnx"),
    ] {
        let plan = check_plan(bytes, name);
        let convs = [Kernel::ConvMma, Kernel::ConvDp4a, Kernel::ConvGeneric];
        assert!(
            plan.launches.iter().any(|l| convs.contains(&l.kernel)),
            "{name}"
        );
    }
}

#[test]
fn the_trained_models_plan_into_their_regions() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("trained");
    for name in ["backbone.onnx", "det_head.onnx", "seg_head.onnx"] {
        let bytes = std::fs::read(dir.join(name)).unwrap();
        let plan = check_plan(&bytes, name);
        // 32- and 48-channel layers: on the tensor cores.
        assert!(
            plan.launches.iter().any(|l| l.kernel == Kernel::ConvMma),
            "{name}"
        );
        assert_eq!(
            plan.step_names.len(),
            plan.launches.last().unwrap().step + 1
        );
    }
}

#[test]
fn a_three_channel_stem_is_padded_to_four_channels_on_the_tensor_cores() {
    // The trained backbone's first convolution reads the 3-channel camera input: with tensor
    // cores it is preceded by a pad into the scratch, which it then reads with 4 channels.
    let l = lowered(crate::export::trained::BACKBONE, "backbone.onnx");
    let plan = LaunchPlan::new(&l, true).unwrap();
    let pad = plan
        .launches
        .iter()
        .position(|l| l.kernel == Kernel::PadChannels)
        .expect("a pad launch");
    let (Params::Pad(p), Params::Conv(c)) =
        (plan.launches[pad].params, plan.launches[pad + 1].params)
    else {
        panic!("pad then conv expected");
    };
    assert_eq!((p.c_in, p.c_out), (3, 4));
    assert_eq!(c.in_c, 4);
    assert_eq!(c.x, p.y);
    assert_eq!(plan.scratch_bytes, p.pixels as usize * 4);
    // Without tensor cores no pad: the generic kernel reads 3 channels.
    let plain = LaunchPlan::new(&l, false).unwrap();
    assert!(plain
        .launches
        .iter()
        .all(|l| l.kernel != Kernel::PadChannels));
    assert_eq!(plain.scratch_bytes, 0);
}

#[cfg(redline_cuda)]
#[test]
fn the_kernels_compile_for_orin_and_hopper() {
    match super::nvrtc_version() {
        Err(e) => {
            // CI sets REDLINE_REQUIRE_NVRTC=1 (it installs NVRTC from PyPI): there a missing
            // NVRTC is a failure, not a skip.
            assert!(
                std::env::var_os("REDLINE_REQUIRE_NVRTC").is_none(),
                "REDLINE_REQUIRE_NVRTC is set but NVRTC cannot be loaded: {e}"
            );
            eprintln!(
                "SKIPPED (loudly): NVRTC is not available, the CUDA kernels were NOT compiled: {e}"
            );
        }
        Ok((maj, min)) => {
            for cc in [87, 90] {
                let ptx = super::compile_ptx(cc).unwrap_or_else(|e| panic!("compute_{cc}: {e}"));
                assert!(ptx.contains(&format!(".target sm_{cc}")), "compute_{cc}");
                for k in Kernel::ALL {
                    assert!(
                        ptx.contains(&format!(".entry {}(", k.name())),
                        "{}",
                        k.name()
                    );
                }
                assert!(
                    ptx.contains("mma.sync.aligned.m16n8k32"),
                    "compute_{cc}: no mma"
                );
                // No fused multiply-add may appear in float code (bit-exactness with the CPU)
                // but the two `__fmaf_rn` the quantized Add asks for (ONNX Runtime's
                // formula, `AddParams`): only in the `binary` kernel.
                for entry in ptx.split(".entry ").skip(1) {
                    if !entry.starts_with("binary(") {
                        assert!(
                            !entry.contains("fma.rn.f32"),
                            "compute_{cc}: fma in {}",
                            entry.split('(').next().unwrap_or("?")
                        );
                    }
                }
                assert!(ptx.contains("fma.rn.f32"), "compute_{cc}: the Add's fma");
                eprintln!("NVRTC {maj}.{min}: compute_{cc} PTX {} bytes", ptx.len());
            }
        }
    }
}

#[test]
fn without_a_gpu_loading_is_a_clear_error_not_a_panic() {
    let r = super::CudaEngine::from_bytes(
        crate::export::builtin::BACKBONE,
        "backbone.onnx",
        &super::CudaOptions::default(),
    );
    match r {
        Ok(_) => eprintln!("a GPU is present: this error path is checked on machines without one"),
        Err(e) => {
            let m = e.to_string();
            let expected = if cfg!(redline_cuda) {
                ["driver", "NVRTC", "device"].iter().any(|w| m.contains(w))
            } else {
                m.contains("--features cuda")
            };
            assert!(expected, "unclear error: {m}");
        }
    }
}

#[test]
fn max_pooling_takes_whole_aligned_words_only_where_channels_and_buffers_allow() {
    // (channels, source offset, destination offset) -> channels per thread.
    for (c, s, d, v) in [
        (64, 0, 64, 16),
        (32, 128, 256, 16),
        (8, 0, 64, 4),
        (48, 4, 64, 4),
        (64, 64, 8, 4),
        (7, 0, 64, 1),
        (64, 2, 64, 1),
        (6, 0, 0, 1),
    ] {
        assert_eq!(max_pool_vector(c, s, d), v, "c {c}, offsets {s}, {d}");
    }
}

#[test]
fn spare_threads_of_the_last_block_keep_32_bit_indices() {
    // The largest element count whose threads' first elements (runs of TRANS_RUN) still
    // index in 32 bits, the last block's spare threads included, and one more.
    let limit = 1usize << 31;
    assert!(grid_for_runs(limit, TRANS_RUN, 0, "transpose").is_ok());
    let e = grid_for_runs(limit + 1, TRANS_RUN, 0, "transpose").unwrap_err();
    assert!(e.to_string().contains("32-bit indices"), "{e}");
    assert!(grid_for(usize::MAX, 0, "maxpool").is_err());
    // One-element kernels: every thread of the grid, the last block's included.
    let max_threads = (i32::MAX as usize + 1) / BLOCK as usize * BLOCK as usize;
    assert!(grid_for(max_threads, 0, "binary").is_ok());
    assert!(grid_for(max_threads + 1, 0, "binary").is_err());
}

/// The launches of the CUDA engine's newer steps, on operator models of
/// `tools/onnx/op_models.py` (python3 with onnx and onnxruntime, which `.ci/run` installs):
/// each model plans, every write lands on its step's buffer, and the step's kernel is there
/// — the global average pool (a block per image and channel group), `ConvTranspose` (one
/// launch per phase image), quantized `Div`/`Sub`, `Pad`, and the float route of
/// TensorRT-style Q/DQ placement (float-output convolutions, float binaries of two tensors,
/// a constant or a broadcast gate, float activations, max and global average pools). Their
/// outputs are checked byte for byte against the native engine on a GPU
/// (`tests/tests/cuda_engine.rs`).
#[test]
fn pools_deconvolutions_pads_and_the_float_route_plan_into_their_regions() {
    type Check = fn(&LaunchPlan) -> bool;
    fn float_conv(p: &LaunchPlan) -> bool {
        p.launches
            .iter()
            .any(|l| matches!(l.params, Params::Conv(c) if c.out_f32 == 1))
    }
    fn fbin(p: &LaunchPlan, mode: i32) -> bool {
        p.launches
            .iter()
            .any(|l| matches!(l.params, Params::FBin(b) if b.mode == mode))
    }
    fn has(p: &LaunchPlan, k: Kernel) -> bool {
        p.launches.iter().any(|l| l.kernel == k)
    }
    let gap_grid: Check = |p| {
        p.launches.iter().any(|l| match l.params {
            // A block per image and group of `vec` channels.
            Params::Pool(q) if l.kernel == Kernel::GlobalAvgPool => {
                l.grid == ((q.c / q.vec) as u32, q.batch as u32, 1) && l.block == GAP_BLOCK
            }
            _ => false,
        })
    };
    let phases: Check = |p| {
        let n: Vec<usize> = p
            .launches
            .iter()
            .filter_map(|l| match l.params {
                Params::Deconv(d) => Some((d.sh * d.sw) as usize),
                _ => None,
            })
            .collect();
        !n.is_empty() && n.len() == n[0]
    };
    let cases: [(&str, &str, Check); 18] = [
        ("gap", "qdq_u8", gap_grid),
        ("gap_shared", "qdq_u8", gap_grid),
        ("avgpool_whole_image", "qdq_u8", gap_grid),
        ("deconv_k2s2", "qdq_u8", phases),
        ("deconv_k4s2p1", "qdq_u8", phases),
        ("deconv_rect_k3x2_s2x1", "qdq_u8", phases),
        ("div_two_tensors", "qdq_u8", |p| {
            p.launches
                .iter()
                .any(|l| matches!(l.params, Params::Bin(b) if b.mul == 3))
        }),
        ("sub_two_tensors", "qdq_u8", |p| {
            p.launches
                .iter()
                .any(|l| matches!(l.params, Params::Bin(b) if b.mul == 4))
        }),
        ("pad_constant", "qdq_u8", |p| has(p, Kernel::PadAny)),
        ("pad_reflect", "qdq_u8", |p| has(p, Kernel::PadAny)),
        ("pad_edge", "qdq_u8", |p| has(p, Kernel::PadAny)),
        ("pad_constant_channels_crop", "qdq_u8", |p| {
            has(p, Kernel::PadAny)
        }),
        ("trt_residual", "trt_u8", |p| float_conv(p) && fbin(p, 0)),
        ("trt_silu", "trt_u8", |p| {
            float_conv(p) && has(p, Kernel::FloatUnary)
        }),
        ("trt_se_scale", "trt_u8", |p| float_conv(p) && fbin(p, 2)),
        ("trt_maxpool", "trt_u8", |p| {
            float_conv(p) && has(p, Kernel::FloatMaxPool)
        }),
        ("trt_gap", "trt_u8", |p| {
            float_conv(p) && has(p, Kernel::FloatGlobalAvgPool)
        }),
        ("trt_constant_operands", "strict_u8", |p| {
            float_conv(p) && fbin(p, 1)
        }),
    ];
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let made = std::process::Command::new("python3")
        .arg(repo.join("tools/onnx/op_models.py"))
        .arg(dir.path())
        .args(["--random", "0", "--only"])
        .args(cases.iter().map(|c| c.0))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !made {
        eprintln!(
            "SKIPPED: python3 with onnx and onnxruntime could not write the operator models: \
             the CUDA launch plans of these steps were NOT checked (pip \
             install onnx onnxruntime)"
        );
        return;
    }
    for (case, variant, check) in cases {
        let path = dir.path().join(format!("{case}_{variant}.onnx"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{case}: {e}"));
        let plan = check_plan(&bytes, case);
        assert!(
            check(&plan),
            "{case}_{variant}: the expected launch is missing"
        );
    }
}
