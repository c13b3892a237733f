//! Quick timing of one model on the native engine (1 lane): `--example onnx_time -- M.onnx N`.
use redline_models::engine::{Engine, Inline};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
    if a.get(3).map(String::as_str) == Some("ort") {
        let threads = a.get(4).and_then(|s| s.parse().ok()).unwrap_or(1);
        let mut e = redline_models::engine::onnxruntime::OrtEngine::load(
            std::path::Path::new(&a[1]),
            &redline_models::engine::onnxruntime::OrtOptions {
                threads,
                qdq_int8_allowed: a.get(5).is_some(),
            },
        )
        .unwrap();
        let ins: Vec<Vec<u8>> = e.inputs().iter().map(|s| vec![0u8; s.byte_len()]).collect();
        let mut outs: Vec<Vec<u8>> = e
            .outputs()
            .iter()
            .map(|s| vec![0u8; s.byte_len()])
            .collect();
        let mut t = Vec::new();
        for _ in 0..n {
            let i: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
            let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
            let s = std::time::Instant::now();
            e.run(&i, &mut o, &Inline).unwrap();
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
        t.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!("ort p50 {:.2} ms", t[n / 2]);
        return;
    }
    let mut e = redline_models::onnx::NativeEngine::load(std::path::Path::new(&a[1])).unwrap();
    let ins: Vec<Vec<u8>> = e.inputs().iter().map(|s| vec![0u8; s.byte_len()]).collect();
    let mut outs: Vec<Vec<u8>> = e
        .outputs()
        .iter()
        .map(|s| vec![0u8; s.byte_len()])
        .collect();
    let mut t = Vec::new();
    for _ in 0..n {
        let i: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
        let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        let s = std::time::Instant::now();
        e.run(&i, &mut o, &Inline).unwrap();
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "p50 {:.2} ms  macs {:.3} G  {:.1} GMAC/s",
        t[n / 2],
        e.macs() as f64 / 1e9,
        e.macs() as f64 / 1e6 / t[n / 2]
    );
    // Per step, once.
    let steps = e.step_macs();
    let mut rows = Vec::new();
    for (i, (name, macs)) in steps.iter().enumerate() {
        let s = std::time::Instant::now();
        for _ in 0..5 {
            e.run_step(i, &Inline).unwrap();
        }
        let ms = s.elapsed().as_secs_f64() * 1e3 / 5.0;
        rows.push((i, name.clone(), *macs, ms));
    }
    for (i, name, macs, ms) in rows {
        if ms > 0.05 {
            println!(
                "{i:3} {name:28} {:8.1} MMAC {ms:7.3} ms {:6.1} GMAC/s",
                macs as f64 / 1e6,
                macs as f64 / 1e6 / ms
            );
        }
    }
}
