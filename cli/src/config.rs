//! The `redline` config file: one TOML file for every subcommand.
//!
//! The file is the pipeline's configuration ([`PipelineConfig`]: lanes, budgets, ladder,
//! network, ...) plus three tables that belong elsewhere: `[scenario]`, the simulator's
//! ([`ScenarioConfig`]: the built-in drive and `redline sim generate`), `[faults]`, the
//! simulator's fault injection ([`FaultConfig`]: applied by `redline replay`), and
//! `[regress]`, the regression harness's ([`RegressConfig`]: repetitions, warm-up,
//! tolerances of `redline regress`). This module splits those tables off and lets each
//! part parse its own keys, so an unknown key anywhere is still an error that names it.
//! Every field is optional.

use std::path::Path;

use redline_bench::regress::setup::fnv1a_hex;
use redline_bench::regress::RegressConfig;
use redline_pipeline::config::{ConfigError, PipelineConfig};
use redline_sim::faults::FaultConfig;
use redline_sim::log::{ReadLimits, SensorMap};
use redline_sim::scenario::ScenarioConfig;
use serde::de::DeserializeOwned;

/// The whole config file.
#[derive(Clone, Debug, PartialEq)]
pub struct RedlineConfig {
    /// Everything but `[scenario]` and `[regress]`.
    pub pipeline: PipelineConfig,
    /// The `[scenario]` table: the built-in drive (resolution lives here).
    pub scenario: ScenarioConfig,
    /// The `[faults]` table: faults `redline replay` injects (empty: none). Camera and
    /// stage names are checked when the source and the graph are known.
    pub faults: FaultConfig,
    /// The `[log]` table: how much a recorded log may make the reader and the replay feed
    /// allocate (see `redline_sim::log::ReadLimits`; every key optional).
    pub log: ReadLimits,
    /// The `[sensors]` table: which topics of a recorded log are the cameras, odometry and
    /// transforms, and a calibration file for what the log lacks (see
    /// `redline_sim::log::sensor_map`; empty: redline's own topic layout).
    pub sensors: SensorMap,
    /// The `[regress]` table: `redline regress`'s repetitions, warm-up and tolerances. Not
    /// part of what a run measures: left out of [`RedlineConfig::config_hash`].
    pub regress: RegressConfig,
}

impl Default for RedlineConfig {
    fn default() -> Self {
        RedlineConfig {
            pipeline: PipelineConfig::default(),
            scenario: ScenarioConfig::default_drive(),
            faults: FaultConfig::default(),
            log: ReadLimits::default(),
            sensors: SensorMap::default(),
            regress: RegressConfig::default(),
        }
    }
}

impl RedlineConfig {
    /// Reads and checks a TOML file.
    pub fn load(path: &Path) -> Result<RedlineConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut cfg = Self::parse(&text, &path.display().to_string())?;
        // A relative calibration file is next to the config file, wherever redline runs.
        if let (Some(cal), Some(dir)) = (&mut cfg.sensors.calibration, path.parent()) {
            if cal.is_relative() {
                *cal = dir.join(&*cal);
            }
        }
        Ok(cfg)
    }

    /// The file at `path`, or the defaults when no file is given.
    pub fn load_or_default(path: Option<&Path>) -> Result<RedlineConfig, ConfigError> {
        path.map_or_else(|| Ok(RedlineConfig::default()), RedlineConfig::load)
    }

    /// Parses and checks TOML text (`origin` names it in messages).
    pub fn parse(text: &str, origin: &str) -> Result<RedlineConfig, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse {
            path: origin.to_string(),
            message,
        };
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| parse_error(e.to_string()))?;
        // Each table split off is parsed by its owner; what is left is the pipeline's.
        let defaults = RedlineConfig::default();
        let scenario = take_section(&mut table, "scenario", origin)?.unwrap_or(defaults.scenario);
        let faults = take_section(&mut table, "faults", origin)?.unwrap_or(defaults.faults);
        let log = take_section(&mut table, "log", origin)?.unwrap_or(defaults.log);
        let sensors = take_section(&mut table, "sensors", origin)?.unwrap_or(defaults.sensors);
        let regress = take_section(&mut table, "regress", origin)?.unwrap_or(defaults.regress);
        let pipeline = parse_section(toml::Value::Table(table)).map_err(parse_error)?;

        let cfg = RedlineConfig {
            pipeline,
            scenario,
            faults,
            log,
            sensors,
            regress,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Range checks of every part.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.pipeline.validate()?;
        self.faults
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        self.sensors.validate().map_err(ConfigError::Invalid)?;
        self.regress
            .validate()
            .map_err(|e| ConfigError::Invalid(e.to_string()))?;
        let w = self.scenario.image_width;
        let h = self.scenario.image_height;
        if !w.is_multiple_of(2) || !h.is_multiple_of(2) || w < 64 || h < 32 {
            return Err(ConfigError::Invalid(format!(
                "scenario.image_width x image_height = {w}x{h}: use even sizes of at least 64x32"
            )));
        }
        Ok(())
    }

    /// The whole file as TOML (what `regress --against` hands its worker processes).
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        let mut table = toml::Table::try_from(&self.pipeline)?;
        table.insert(
            "scenario".to_string(),
            toml::Value::try_from(&self.scenario)?,
        );
        // Only when there are faults: a file without them keeps its text (and hash).
        if !self.faults.is_empty() {
            table.insert("faults".to_string(), toml::Value::try_from(&self.faults)?);
        }
        // Only when changed, for the same reason.
        if self.log != ReadLimits::default() {
            table.insert("log".to_string(), toml::Value::try_from(self.log)?);
        }
        if self.sensors != SensorMap::default() {
            table.insert("sensors".to_string(), toml::Value::try_from(&self.sensors)?);
        }
        table.insert("regress".to_string(), toml::Value::try_from(&self.regress)?);
        toml::to_string(&table)
    }

    /// Hash (FNV-1a 64, hex) of everything that changes a run's measurements: the pipeline
    /// part and the scenario, not the `[regress]` table. Baselines record it, so a check
    /// against a baseline of another config says so. (`redline regress` refuses a config
    /// with faults.)
    pub fn config_hash(&self) -> String {
        let measured = RedlineConfig {
            regress: RegressConfig::default(),
            ..self.clone()
        };
        fnv1a_hex(&measured.to_toml().unwrap_or_default())
    }
}

/// One table of the file, parsed by the type that owns it; the message names the key.
fn parse_section<T: DeserializeOwned>(value: toml::Value) -> Result<T, String> {
    value.try_into().map_err(|e: toml::de::Error| e.to_string())
}

/// Removes table `[name]` from `table` and parses it (None when the file has none).
fn take_section<T: DeserializeOwned>(
    table: &mut toml::Table,
    name: &str,
    origin: &str,
) -> Result<Option<T>, ConfigError> {
    table
        .remove(name)
        .map(|v| {
            parse_section(v).map_err(|message| ConfigError::Parse {
                path: origin.to_string(),
                message: format!("[{name}]: {message}"),
            })
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use redline_pipeline::config::{stage, Perception};

    #[test]
    fn defaults_validate_and_round_trip_through_toml() {
        let d = RedlineConfig::default();
        d.validate().unwrap();
        let back = RedlineConfig::parse(&d.to_toml().unwrap(), "round-trip").unwrap();
        assert_eq!(back, d);
    }

    #[test]
    fn a_sensors_table_parses_round_trips_and_is_checked() {
        let text = "[sensors]\nodometry = \"/localization/kinematic_state\"\ncalibration = \"rig.toml\"\n[[sensors.cameras]]\nname = \"front\"\nimage = \"/sensing/camera/front/image_raw/compressed\"\ncamera_info = \"/sensing/camera/front/camera_info\"\n";
        let c = RedlineConfig::parse(text, "t").unwrap();
        assert_eq!(c.sensors.odometry_topic(), "/localization/kinematic_state");
        assert_eq!(c.sensors.cameras[0].name, "front");
        let back = RedlineConfig::parse(&c.to_toml().unwrap(), "round-trip").unwrap();
        assert_eq!(back, c);
        assert_ne!(c.config_hash(), RedlineConfig::default().config_hash());
        let e = RedlineConfig::parse("[sensors]\nodom = \"/x\"\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[sensors]") && e.contains("odom"), "{e}");
        let e = RedlineConfig::parse(
            "[[sensors.cameras]]\nname = \"a\"\nimage = \"/i\"\n[[sensors.cameras]]\nname = \"a\"\nimage = \"/j\"\n",
            "f.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("twice"), "{e}");
        // a relative calibration file is taken next to the config file
        let dir = std::env::temp_dir().join(format!("redline-sensors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("redline.toml");
        std::fs::write(&file, text).unwrap();
        let c = RedlineConfig::load(&file).unwrap();
        assert_eq!(c.sensors.calibration, Some(dir.join("rig.toml")));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn both_parts_parse_from_one_file() {
        let c = RedlineConfig::parse(
            "lanes = 1\nperception = \"oracle\"\n[scenario]\nseed = 9\nimage_width = 128\n[budgets_ms]\nbackbone = 20.0\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.pipeline.lanes, 1);
        assert_eq!(c.pipeline.perception, Perception::Oracle);
        assert_eq!(c.pipeline.budget_ns(stage::BACKBONE), 20_000_000);
        assert_eq!(c.scenario.seed, 9);
        assert_eq!(c.scenario.image_width, 128);
        assert_eq!(
            c.scenario.image_height, 192,
            "a partial [scenario] keeps the scenario's defaults"
        );
        assert_eq!(
            RedlineConfig::parse("", "t").unwrap(),
            RedlineConfig::default()
        );
        // The six-camera rig, and back through TOML (which has no null).
        let six = RedlineConfig::parse("[scenario]\ntele_hfov_deg = \"off\"\n", "t").unwrap();
        assert_eq!(six.scenario.tele_hfov_deg, None);
        assert_eq!(
            RedlineConfig::parse(&six.to_toml().unwrap(), "t").unwrap(),
            six
        );
        let c = RedlineConfig::default();
        assert_eq!(c.scenario.tele_hfov_deg, Some(20.0));
        assert_eq!(RedlineConfig::parse(&c.to_toml().unwrap(), "t").unwrap(), c);
    }

    #[test]
    fn the_log_table_sets_read_limits_and_changes_the_hash_only_when_present() {
        let c = RedlineConfig::parse("[log]\nmax_chunk_bytes = 1048576\nmax_frames = 10\n", "t")
            .unwrap();
        assert_eq!(c.log.max_chunk_bytes, 1 << 20);
        assert_eq!(c.log.max_frames, 10);
        assert_eq!(
            c.log.max_record_bytes,
            ReadLimits::default().max_record_bytes,
            "keys left out keep their defaults"
        );
        assert_eq!(RedlineConfig::parse(&c.to_toml().unwrap(), "t").unwrap(), c);
        assert_ne!(c.config_hash(), RedlineConfig::default().config_hash());
        let e = RedlineConfig::parse("[log]\nmax_chunk = 1\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_chunk"), "{e}");
    }

    #[test]
    fn mistakes_are_named() {
        let e = RedlineConfig::parse("lanez = 2\n", "f.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("lanez") && e.contains("f.toml"), "{e}");
        let e = RedlineConfig::parse("[scenario]\nseed = \"x\"\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("scenario"), "{e}");
        let e = RedlineConfig::parse("[scenario]\nimage_width = 63\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("image_width"), "{e}");
        let e = RedlineConfig::parse("lanes = [\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f"), "{e}");
    }

    #[test]
    fn regress_table_parses_and_rejects_mistakes() {
        let c = RedlineConfig::parse(
            "lanes = 1\n[regress]\nreps = 7\np99 = { relative = 0.3, floor_us = 80.0 }\n",
            "t",
        )
        .unwrap();
        assert_eq!(c.pipeline.lanes, 1);
        assert_eq!(c.regress.reps, 7);
        assert_eq!(c.regress.p99.floor_us, 80.0);
        assert_eq!(c.regress.p50, RegressConfig::default().p50);
        let e = RedlineConfig::parse("[regress]\nreps = 0\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("regress.reps"), "{e}");
        let e = RedlineConfig::parse("[regress]\np50 = { relativ = 0.1, floor_us = 1.0 }\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("relativ") && e.contains("[regress]"), "{e}");
        let e = RedlineConfig::parse(
            "[regress]\nmax = { relative = -1.0, floor_us = 1.0 }\n",
            "t",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("regress.max.relative"), "{e}");
    }

    #[test]
    fn faults_table_parses_round_trips_and_rejects_mistakes() {
        let text = "lanes = 1\n[faults]\nseed = 3\n[[faults.sensor]]\ntarget = \"front\"\nfault = \"drop\"\nframes = \"5..9\"\n[[faults.stage]]\nstage = \"backbone\"\nfault = \"stall\"\nstall_ms = 20.0\nrate = 0.1\n";
        let c = RedlineConfig::parse(text, "t").unwrap();
        assert_eq!(c.pipeline.lanes, 1);
        assert_eq!(c.faults.seed, 3);
        assert_eq!(c.faults.sensor[0].target, "front");
        assert_eq!(c.faults.stage[0].stall_ms, Some(20.0));
        let back = RedlineConfig::parse(&c.to_toml().unwrap(), "round-trip").unwrap();
        assert_eq!(back, c);
        assert_ne!(
            c.config_hash(),
            RedlineConfig::parse("lanes = 1\n", "t")
                .unwrap()
                .config_hash()
        );
        // No faults: the file's TOML (and so its hash) has no [faults] table.
        assert!(!RedlineConfig::default()
            .to_toml()
            .unwrap()
            .contains("faults"));
        let e = RedlineConfig::parse(
            "[faults]\n[[faults.stage]]\nstage = \"bev\"\nfault = \"stall\"\nframes = \"1\"\n",
            "f",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("faults.stage]] #1") && e.contains("stall_ms"),
            "{e}"
        );
        let e = RedlineConfig::parse("[faults]\nsed = 1\n", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[faults]") && e.contains("sed"), "{e}");
    }

    #[test]
    fn config_hash_covers_pipeline_and_scenario_not_regress() {
        let a = RedlineConfig::default();
        let mut b = a.clone();
        b.regress.reps = 9;
        b.regress.p50.relative = 0.5;
        assert_eq!(a.config_hash(), b.config_hash());
        let mut c = a.clone();
        c.pipeline.lanes = 1;
        assert_ne!(a.config_hash(), c.config_hash());
        let mut d = a.clone();
        d.scenario.seed += 1;
        assert_ne!(a.config_hash(), d.config_hash());
    }
}
