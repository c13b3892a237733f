//! What a model declares in its ONNX `metadata_props` beyond its shapes, and how a run
//! uses it ([`super::load_models`] reads it; the graph checks the rig).
//!
//! The BEV grid's channels are the features sampled at each lift height in turn
//! (`lifts · C`; see [`crate::perception::BevProjector`]). How the cells sample them is part
//! of what a network was trained with, so a model may declare it in its ONNX
//! `metadata_props` ([`ViewTransform`]): [`META_BEV_LIFT_M`] (heights in metres,
//! comma-separated in the heads' channel order, e.g. `0.5,0`) and [`META_BEV_SAMPLING`]
//! (`nearest` or `row_linear`). Declared values are the run's unless the config sets
//! `bev_lift_m` / `bev_sampling`, which must then agree with them; models that declare
//! nothing run the config's values or its defaults. `tools/train/export.py` writes both
//! keys into all three models.
//!
//! A network is also tied to the camera rig it was trained on (the view transform's tables
//! come from the rig, and the features from what each camera sees), and nothing in the
//! tensor shapes says which rig that was beyond the camera count. So a model may declare
//! it: [`META_CAMERA_HFOV_DEG`] and [`META_CAMERA_YAW_DEG`], each camera's horizontal field
//! of view and heading in the backbone's camera order. The graph then refuses a log whose
//! cameras differ by more than [`RIG_TOLERANCE_DEG`] ([`check_rig`]) instead of running a
//! network on views it never saw.
//!
//! Construction time only (parses strings, allocates); errors name the model, the key and
//! what was expected, or both values and what to do.

use super::{Loaded, ModelsError};
use crate::camera::CameraSpec;
use crate::config::PipelineConfig;
use crate::perception::{BevSampling, MAX_CAMERAS, MAX_LIFTS};

/// ONNX `metadata_props` key under which a model declares the heights (m) at which the BEV
/// cells sample the features, comma-separated in the heads' channel order (e.g. `0.5,0`):
/// the config's `bev_lift_m`.
pub const META_BEV_LIFT_M: &str = "redline.bev_lift_m";
/// ONNX `metadata_props` key under which a model declares how the BEV cells read the
/// feature maps ([`BevSampling::name`]: `nearest` or `row_linear`): the config's
/// `bev_sampling`.
pub const META_BEV_SAMPLING: &str = "redline.bev_sampling";

/// ONNX `metadata_props` key under which a model declares the horizontal field of view
/// (degrees) of each camera of the rig it was trained on, comma-separated in the backbone's
/// camera order (e.g. `40,80,80,80,80,70,20`).
pub const META_CAMERA_HFOV_DEG: &str = "redline.camera_hfov_deg";
/// ONNX `metadata_props` key under which a model declares the heading (degrees, 0 =
/// forward, +90 = left) of each camera of the rig it was trained on, in the same order.
pub const META_CAMERA_YAW_DEG: &str = "redline.camera_yaw_deg";
/// How far (degrees) a log camera's field of view or heading may be from the declared one.
pub const RIG_TOLERANCE_DEG: f64 = 0.5;

/// The camera rig the models declare they were trained on (module docs): `None` where no
/// model declares that key. [`check_rig`] compares it with a log's cameras.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct DeclaredRig {
    /// Horizontal field of view per camera, degrees.
    pub hfov_deg: Option<Vec<f64>>,
    /// Heading per camera, degrees.
    pub yaw_deg: Option<Vec<f64>>,
}

/// The view transform a run uses (module docs): the models' declared values, the config's,
/// or the defaults ([`PipelineConfig::bev_lifts`], [`PipelineConfig::bev_sampling`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ViewTransform {
    /// Lift heights, m, in the heads' channel order.
    pub lifts: Vec<f32>,
    /// How cells read the feature maps.
    pub sampling: BevSampling,
}

/// Checks a log's `cameras` against the rig the models declare (module docs): the same
/// count, and each camera's horizontal field of view and heading within
/// [`RIG_TOLERANCE_DEG`] of the declared ones. Keys no model declares are not checked.
/// The error names the camera, both values and what to do.
pub fn check_rig(rig: &DeclaredRig, cameras: &[CameraSpec]) -> Result<(), ModelsError> {
    let of_camera: [fn(&CameraSpec) -> f64; 2] = [CameraSpec::hfov_deg, CameraSpec::yaw_deg];
    let checks = [
        ("horizontal field of view", &rig.hfov_deg, of_camera[0]),
        ("heading", &rig.yaw_deg, of_camera[1]),
    ];
    let show = |v: &[f64]| {
        v.iter()
            .map(|d| format!("{d:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let advice = "replay logs recorded with the rig the models were trained on (for the \
                  shipped network, `redline sim generate` with its default cameras), give \
                  models trained on this rig in the [models] table, or set check_rig = \
                  false in the config to run them anyway";
    for (what, declared, of) in checks {
        let Some(want) = declared else { continue };
        let got: Vec<f64> = cameras.iter().map(of).collect();
        if want.len() != got.len() {
            return Err(ModelsError::Rig {
                reason: format!(
                    "the models were trained on {} cameras ({what} {} degrees) but this log \
                     has {}: {advice}",
                    want.len(),
                    show(want),
                    got.len()
                ),
            });
        }
        for (i, ((w, g), cam)) in want.iter().zip(&got).zip(cameras).enumerate() {
            // Headings compare modulo a turn.
            let off = (g - w + 180.0).rem_euclid(360.0) - 180.0;
            if off.abs() > RIG_TOLERANCE_DEG {
                return Err(ModelsError::Rig {
                    reason: format!(
                        "camera {} ({}) has a {what} of {g:.1} degrees, but the models were \
                         trained with {w:.1} (their rig: {}; this log's: {}): {advice}",
                        i + 1,
                        cam.name,
                        show(want),
                        show(&got)
                    ),
                });
            }
        }
    }
    Ok(())
}

/// `40,80,20` -> `[40.0, 80.0, 20.0]`: 1 to [`MAX_CAMERAS`] finite angles.
fn parse_degrees(raw: &str) -> Option<Vec<f64>> {
    parse_finite_list(raw, MAX_CAMERAS)
}

/// `a, b, c` -> the numbers, when there are 1 to `max` of them and all are finite.
fn parse_finite_list<T: std::str::FromStr + Into<f64> + Copy>(
    raw: &str,
    max: usize,
) -> Option<Vec<T>> {
    let v = raw
        .split(',')
        .map(|x| x.trim().parse::<T>().ok().filter(|&x| x.into().is_finite()))
        .collect::<Option<Vec<T>>>()?;
    (1..=max).contains(&v.len()).then_some(v)
}

/// The run's view transform: each key's value declared by the models (all that declare it
/// must agree), which a config value must equal; the config's value or default where no
/// model declares the key.
pub(super) fn resolve_view(
    cfg: &PipelineConfig,
    models: [&Loaded; 3],
) -> Result<ViewTransform, ModelsError> {
    let heights =
        format!("1 to {MAX_LIFTS} finite heights in metres, comma-separated (e.g. 0.5,0)");
    let lifts = declared(&models, META_BEV_LIFT_M, parse_lifts, &heights)?;
    let sampling = declared(
        &models,
        META_BEV_SAMPLING,
        BevSampling::from_name,
        "nearest or row_linear",
    )?;
    let lifts = agree(
        "bev_lift_m",
        cfg.bev_lift_m.clone(),
        lifts,
        cfg.bev_lifts(),
        |l| format!("{l:?}"),
    )?;
    let sampling = agree(
        "bev_sampling",
        cfg.bev_sampling,
        sampling,
        cfg.bev_sampling(),
        |s| format!("\"{}\"", s.name()),
    )?;
    Ok(ViewTransform { lifts, sampling })
}

/// The value of metadata key `key` the models declare (and the first model declaring it),
/// parsed by `parse`; `None` when none declares it. A value `parse` refuses is a contract
/// error saying what is expected (`what`); two models declaring different values, a
/// [`ModelsError::Metadata`].
fn declared<'a, T: PartialEq>(
    models: &[&'a Loaded; 3],
    key: &str,
    parse: fn(&str) -> Option<T>,
    what: &str,
) -> Result<Option<(T, &'a Loaded)>, ModelsError> {
    let mut found: Option<(T, &Loaded, &str)> = None;
    for &m in models {
        let Some((_, raw)) = m.metadata.iter().find(|(k, _)| k == key) else {
            continue;
        };
        let Some(v) = parse(raw.trim()) else {
            return Err(m.err(format!(
                "metadata {key} = {raw:?} is not valid: it must be {what}"
            )));
        };
        match &found {
            Some((first, by, first_raw)) if *first != v => {
                return Err(ModelsError::Metadata {
                    reason: format!(
                        "the {} model {} declares {key} = {first_raw:?} but the {} model {} \
                         declares {raw:?}: the backbone and the heads must come from one \
                         training run",
                        by.model, by.name, m.model, m.name
                    ),
                })
            }
            Some(_) => {}
            None => found = Some((v, m, raw)),
        }
    }
    Ok(found.map(|(v, m, _)| (v, m)))
}

/// One view-transform setting: the config's `set` value must equal the models' declared
/// one; either wins where the other is absent; `default` when both are.
fn agree<T: PartialEq>(
    key: &str,
    set: Option<T>,
    declared: Option<(T, &Loaded)>,
    default: T,
    show: fn(&T) -> String,
) -> Result<T, ModelsError> {
    match (set, declared) {
        (Some(set), Some((v, by))) if set != v => Err(ModelsError::Metadata {
            reason: format!(
                "the config sets {key} = {} but the {} model {} was trained with {} (its \
                 metadata): remove {key} from the config to run the models' own, or give \
                 models trained with {}",
                show(&set),
                by.model,
                by.name,
                show(&v),
                show(&set)
            ),
        }),
        (Some(v), _) | (None, Some((v, _))) => Ok(v),
        (None, None) => Ok(default),
    }
}

/// `0.5,0` -> `[0.5, 0.0]`: 1 to [`MAX_LIFTS`] finite heights.
pub(super) fn parse_lifts(raw: &str) -> Option<Vec<f32>> {
    parse_finite_list(raw, MAX_LIFTS)
}

/// The rig the models declare ([`META_CAMERA_HFOV_DEG`], [`META_CAMERA_YAW_DEG`]; all
/// that declare a key must agree).
pub(super) fn declared_rig(models: [&Loaded; 3]) -> Result<DeclaredRig, ModelsError> {
    let degrees = |key| {
        let what = "one finite angle in degrees per camera, comma-separated";
        declared(&models, key, parse_degrees, what).map(|d| d.map(|(v, _)| v))
    };
    Ok(DeclaredRig {
        hfov_deg: degrees(META_CAMERA_HFOV_DEG)?,
        yaw_deg: degrees(META_CAMERA_YAW_DEG)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 256-px-wide camera `name` with horizontal FOV `hfov` and heading `yaw` (degrees).
    fn camera(name: &str, hfov: f64, yaw: f64) -> CameraSpec {
        let fx = 128.0 / crate::camera::det::tan((0.5 * hfov).to_radians());
        CameraSpec {
            name: name.into(),
            width: 256,
            height: 128,
            fx,
            fy: fx,
            cx: 128.0,
            cy: 64.0,
            x: 0.0,
            y: 0.0,
            z: 1.6,
            yaw: yaw.to_radians(),
            pitch: 0.0,
            distortion: Default::default(),
        }
    }

    #[test]
    fn a_log_from_another_rig_than_the_declared_one_is_refused_with_the_camera() {
        let rig = DeclaredRig {
            hfov_deg: Some(vec![40.0, 80.0, 20.0]),
            yaw_deg: Some(vec![0.0, 180.0, 0.0]),
        };
        let cams = |tele: f64, back_yaw: f64| {
            vec![
                camera("front", 40.0, 0.0),
                camera("back", 80.0, back_yaw),
                camera("front_tele", tele, 0.0),
            ]
        };
        check_rig(&rig, &cams(20.0, 180.0)).expect("the declared rig");
        // Within the tolerance, and headings modulo a turn.
        check_rig(&rig, &cams(20.0 + 0.4, -180.0 + 0.3)).expect("close enough");
        let msg = check_rig(&rig, &cams(10.0, 180.0)).unwrap_err().to_string();
        assert!(
            msg.contains("camera 3 (front_tele)")
                && msg.contains("field of view of 10.0 degrees")
                && msg.contains("trained with 20.0")
                && msg.contains("redline sim generate"),
            "{msg}"
        );
        let msg = check_rig(&rig, &cams(20.0, 90.0)).unwrap_err().to_string();
        assert!(
            msg.contains("camera 2 (back)") && msg.contains("heading of 90.0"),
            "{msg}"
        );
        let msg = check_rig(&rig, &cams(20.0, 180.0)[..2])
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("trained on 3 cameras") && msg.contains("has 2"),
            "{msg}"
        );
        // Nothing declared: nothing checked.
        check_rig(&DeclaredRig::default(), &cams(10.0, 90.0)).expect("no declaration");
    }
}
