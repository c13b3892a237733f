//! Tests of the onnxruntime backend: library discovery (always), and loading and running
//! the committed fixtures in `models/tests/data` (skipped loudly without the library).
use super::*;
use crate::engine::Inline;

#[test]
fn a_missing_ort_dylib_path_is_named() {
    let e = find_library_with(Some("/nonexistent/libonnxruntime.so".into()), || {
        panic!("the Python probe must not run when ORT_DYLIB_PATH is set")
    })
    .unwrap_err();
    assert!(matches!(e, EngineError::Backend(_)), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("ORT_DYLIB_PATH") && m.contains("/nonexistent/libonnxruntime.so"),
        "{m}"
    );
}

#[test]
fn nothing_found_says_how_to_install() {
    let e = find_library_with(None, || None).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("python3 -m pip install onnxruntime")
            && m.contains("ORT_DYLIB_PATH=/path/to/libonnxruntime.so"),
        "{m}"
    );
    // An empty variable counts as unset.
    let e = find_library_with(Some("".into()), || None).unwrap_err();
    assert!(e.to_string().contains("pip install onnxruntime"), "{e}");
}

#[test]
fn a_package_without_the_library_says_how_to_install() {
    let scratch = scratch_dir("empty-pkg");
    let dir = scratch.path();
    std::fs::create_dir_all(dir.join("capi")).unwrap();
    std::fs::write(
        dir.join("capi").join("libonnxruntime_providers_shared.so"),
        b"x",
    )
    .unwrap();
    let e = find_library_with(None, || Some(dir.to_path_buf())).unwrap_err();
    let m = e.to_string();
    assert!(
        m.contains("capi") && m.contains("pip install onnxruntime"),
        "{m}"
    );
}

#[test]
#[cfg(all(unix, not(target_os = "macos")))]
fn the_package_library_is_found_in_capi() {
    let scratch = scratch_dir("pkg");
    let dir = scratch.path();
    let capi = dir.join("capi");
    std::fs::create_dir_all(&capi).unwrap();
    for f in [
        "libonnxruntime_providers_shared.so",
        "libonnxruntime.so.1.32.0",
        "onnxruntime_pybind11_state.so",
    ] {
        std::fs::write(capi.join(f), b"x").unwrap();
    }
    let found = find_library_with(None, || Some(dir.to_path_buf())).unwrap();
    assert_eq!(found, capi.join("libonnxruntime.so.1.32.0"));
    // The unversioned name wins when both are there.
    std::fs::write(capi.join("libonnxruntime.so"), b"x").unwrap();
    let found = find_library_with(None, || Some(dir.to_path_buf())).unwrap();
    assert_eq!(found, capi.join("libonnxruntime.so"));
}

#[test]
fn an_existing_env_path_wins() {
    let scratch = scratch_dir("env");
    let dir = scratch.path();
    let f = dir.join("libonnxruntime.so");
    std::fs::write(&f, b"x").unwrap();
    let got = find_library_with(Some(f.clone().into()), || {
        panic!("the Python probe must not run when ORT_DYLIB_PATH is set")
    })
    .unwrap();
    assert_eq!(got, f);
}

#[test]
fn options_default_to_one_thread() {
    assert_eq!(OrtOptions::default().threads, 1);
}

/// A fresh folder for one test (tests run in parallel in one process), removed when dropped.
fn scratch_dir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("redline-ort-test-{name}-"))
        .tempdir()
        .unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Loads a fixture, or prints why the test is skipped when ONNX Runtime is missing.
fn load_or_skip(test: &str, name: &str) -> Option<OrtEngine> {
    if let Err(e) = runtime() {
        eprintln!("SKIPPED: {test}: ONNX Runtime is not available: {e}");
        return None;
    }
    Some(OrtEngine::load(&fixture(name), &OrtOptions::default()).unwrap())
}

fn runtime_or_skip(test: &str) -> bool {
    match runtime() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("SKIPPED: {test}: ONNX Runtime is not available: {e}");
            false
        }
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn a_float_add_relu_runs() {
    let Some(mut e) = load_or_skip("a_float_add_relu_runs", "ort_add_relu.onnx") else {
        return;
    };
    assert_eq!(e.kind(), EngineKind::OnnxRuntime);
    let spec = |n: &str| TensorSpec {
        name: n.into(),
        elem: ElemType::F32,
        shape: vec![2, 3],
    };
    assert_eq!(e.inputs(), &[spec("a"), spec("b")]);
    assert_eq!(e.outputs(), &[spec("y")]);
    assert_eq!(e.macs(), 0);
    e.set_macs(42);
    assert_eq!(e.macs(), 42);
    // Staging for the two float inputs and the output tensor.
    assert_eq!(e.scratch_bytes(), 3 * 24);

    let a = f32_bytes(&[1.0, -2.0, 3.0, -4.0, 5.5, 0.0]);
    let b = f32_bytes(&[0.5, 1.0, -4.0, 5.0, 0.25, -1.0]);
    let mut y = vec![0u8; 24];
    e.run(&[&a, &b], &mut [&mut y], &Inline).unwrap();
    assert_eq!(f32s(&y), [1.5, 0.0, 0.0, 1.0, 5.75, 0.0]);

    // Misaligned input buffers take the staging path and give the same result.
    let mut a1 = [0u32; 7];
    let mut b1 = [0u32; 7];
    let a1: &mut [u8] = bytemuck::cast_slice_mut(&mut a1);
    let b1: &mut [u8] = bytemuck::cast_slice_mut(&mut b1);
    a1[1..25].copy_from_slice(&a);
    b1[1..25].copy_from_slice(&b);
    assert!(bytemuck::try_cast_slice::<u8, f32>(&a1[1..25]).is_err());
    let mut y2 = vec![0xffu8; 24];
    e.run(&[&a1[1..25], &b1[1..25]], &mut [&mut y2], &Inline)
        .unwrap();
    assert_eq!(y2, y);

    // Runs again on new data (the preallocated output is rewritten).
    let a = f32_bytes(&[-1.0; 6]);
    e.run(&[&a, &a], &mut [&mut y], &Inline).unwrap();
    assert_eq!(f32s(&y), [0.0; 6]);
}

#[test]
fn an_int8_qlinearconv_runs() {
    let Some(mut e) = load_or_skip("an_int8_qlinearconv_runs", "ort_qlinearconv.onnx") else {
        return;
    };
    assert_eq!(e.inputs()[0].elem, ElemType::I8);
    assert_eq!(e.inputs()[0].shape, [1, 1, 3, 3]);
    assert_eq!(e.outputs()[0].elem, ElemType::I8);
    assert_eq!(e.outputs()[0].shape, [1, 1, 2, 2]);
    let x: [i8; 9] = [1, 2, 3, 4, 5, -6, 7, 8, 100];
    let w: [i32; 4] = [1, 2, -1, 3];
    // Scales 1, zero points 0 (x, w) and 3 (y), bias 10, saturated to int8.
    let mut want = [0i8; 4];
    for oy in 0..2 {
        for ox in 0..2 {
            let mut acc = 10;
            for ky in 0..2 {
                for kx in 0..2 {
                    acc += i32::from(x[(oy + ky) * 3 + ox + kx]) * w[ky * 2 + kx];
                }
            }
            want[oy * 2 + ox] = (acc + 3).clamp(-128, 127) as i8;
        }
    }
    assert_eq!(want[3], 127, "the fixture exercises saturation");
    let xb: Vec<u8> = x.iter().map(|&v| v as u8).collect();
    let mut y = [0u8; 4];
    e.run(&[&xb], &mut [&mut y], &Inline).unwrap();
    assert_eq!(y.map(|v| v as i8), want);
}

#[test]
fn uint8_int32_and_int64_tensors_round_trip() {
    let Some(mut e) = load_or_skip("uint8_int32_and_int64_tensors_round_trip", "ort_types.onnx")
    else {
        return;
    };
    let elems: Vec<ElemType> = e
        .inputs()
        .iter()
        .chain(e.outputs())
        .map(|s| s.elem)
        .collect();
    assert_eq!(
        elems,
        [ElemType::U8, ElemType::I32, ElemType::F32, ElemType::I64]
    );
    let u = [0u8, 1, 200, 255];
    let i: Vec<u8> = [-7i32, 1 << 30]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mut uf = vec![0u8; 16];
    let mut il = vec![0u8; 16];
    e.run(&[&u, &i], &mut [&mut uf, &mut il], &Inline).unwrap();
    assert_eq!(f32s(&uf), [0.0, 1.0, 200.0, 255.0]);
    let il: Vec<i64> = il
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(il, [-7, 1 << 30]);
}

#[test]
fn wrong_buffers_are_errors() {
    let Some(mut e) = load_or_skip("wrong_buffers_are_errors", "ort_add_relu.onnx") else {
        return;
    };
    let a = vec![0u8; 24];
    let short = vec![0u8; 20];
    let mut y = vec![0u8; 24];
    let mut y_long = vec![0u8; 28];
    let err = e.run(&[&a, &short], &mut [&mut y], &Inline).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::BufferSize {
                what: "input",
                index: 1,
                expected: 24,
                got: 20
            }
        ),
        "{err:?}"
    );
    let err = e.run(&[&a, &a], &mut [&mut y_long], &Inline).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::BufferSize {
                what: "output",
                index: 0,
                expected: 24,
                got: 28
            }
        ),
        "{err:?}"
    );
    let err = e.run(&[&a], &mut [&mut y], &Inline).unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::BufferCount {
                what: "input",
                expected: 2,
                got: 1
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_named_dynamic_dimension_is_fixed_to_one() {
    let Some(mut e) = load_or_skip(
        "a_named_dynamic_dimension_is_fixed_to_one",
        "ort_dynamic.onnx",
    ) else {
        return;
    };
    assert_eq!(e.inputs()[0].shape, [1, 4]);
    assert_eq!(e.outputs()[0].shape, [1, 4]);
    let x = f32_bytes(&[-1.0, 2.0, -3.0, 4.0]);
    let mut y = vec![0u8; 16];
    e.run(&[&x], &mut [&mut y], &Inline).unwrap();
    assert_eq!(f32s(&y), [0.0, 2.0, 0.0, 4.0]);
}

#[test]
fn an_unnamed_dynamic_dimension_is_named_in_the_error() {
    if !runtime_or_skip("an_unnamed_dynamic_dimension_is_named_in_the_error") {
        return;
    }
    let err =
        OrtEngine::load(&fixture("ort_unnamed_dim.onnx"), &OrtOptions::default()).unwrap_err();
    let m = err.to_string();
    assert!(matches!(err, EngineError::Invalid { .. }), "{err:?}");
    assert!(
        m.contains("input \"x\"") && m.contains("dimension 0") && m.contains("static shapes"),
        "{m}"
    );
}

#[test]
fn an_unsupported_element_type_names_the_tensor() {
    if !runtime_or_skip("an_unsupported_element_type_names_the_tensor") {
        return;
    }
    let err = OrtEngine::load(&fixture("ort_float16.onnx"), &OrtOptions::default()).unwrap_err();
    let EngineError::Unsupported { node, reason, .. } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(node, "x");
    assert!(reason.contains("float32, int8"), "{reason}");
}

#[test]
fn bad_files_are_clear_errors() {
    if !runtime_or_skip("bad_files_are_clear_errors") {
        return;
    }
    let scratch = scratch_dir("bad");
    let dir = scratch.path();
    let junk = dir.join("junk.onnx");
    std::fs::write(&junk, b"this is not a protobuf").unwrap();
    let err = OrtEngine::load(&junk, &OrtOptions::default()).unwrap_err();
    assert!(matches!(err, EngineError::Parse { .. }), "{err:?}");
    assert!(err.to_string().contains("junk.onnx"), "{err}");

    let missing = dir.join("missing.onnx");
    let err = OrtEngine::load(&missing, &OrtOptions::default()).unwrap_err();
    assert!(matches!(err, EngineError::Io { .. }), "{err:?}");
}

#[test]
fn the_library_is_loaded_once() {
    if !runtime_or_skip("the_library_is_loaded_once") {
        return;
    }
    let first = loaded_library().unwrap();
    let a = runtime().unwrap() as *const Runtime;
    let b = runtime().unwrap() as *const Runtime;
    assert_eq!(a, b);
    assert_eq!(loaded_library(), Some(first));
}
