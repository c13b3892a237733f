//! The `redline` config file: one TOML file for every subcommand.
//!
//! The file is the pipeline's configuration ([`PipelineConfig`]: lanes, budgets, ladder,
//! network, ...) plus the `[scenario]` table, which belongs to the simulator
//! ([`ScenarioConfig`]: the built-in drive and `redline sim generate`). This module splits
//! the `[scenario]` table off and lets each part parse its own keys, so an unknown key
//! anywhere is still an error that names it. Every field is optional.

use std::path::Path;

use redline_pipeline::config::{ConfigError, PipelineConfig};
use redline_sim::scenario::ScenarioConfig;
use serde::Deserialize;

/// The whole config file.
#[derive(Clone, Debug, PartialEq)]
pub struct RedlineConfig {
    /// Everything but `[scenario]`.
    pub pipeline: PipelineConfig,
    /// The `[scenario]` table: the built-in drive (resolution lives here).
    pub scenario: ScenarioConfig,
}

impl Default for RedlineConfig {
    fn default() -> Self {
        RedlineConfig {
            pipeline: PipelineConfig::default(),
            scenario: ScenarioConfig::default_drive(),
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
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and checks TOML text (`origin` names it in messages).
    pub fn parse(text: &str, origin: &str) -> Result<RedlineConfig, ConfigError> {
        let parse_error = |message: String| ConfigError::Parse {
            path: origin.to_string(),
            message,
        };
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| parse_error(e.to_string()))?;
        let defaults = RedlineConfig::default();
        let scenario = match table.remove("scenario") {
            Some(v) => ScenarioConfig::deserialize(v)
                .map_err(|e| parse_error(format!("[scenario]: {e}")))?,
            None => defaults.scenario,
        };
        let pipeline = PipelineConfig::deserialize(toml::Value::Table(table))
            .map_err(|e| parse_error(e.to_string()))?;
        let cfg = RedlineConfig { pipeline, scenario };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Range checks of both parts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.pipeline.validate()?;
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
        toml::to_string(&table)
    }
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
}
