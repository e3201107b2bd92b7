//! Durations as humantime strings (`"30s"`, `"200ms"`, `"7d"`).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer, de::Error};

pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&humantime::format_duration(*value).to_string())
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    humantime::parse_duration(text.trim()).map_err(|error| {
        D::Error::custom(format!(
            "invalid duration {text:?} ({error}); write e.g. \"30s\", \"200ms\", \"10m\", \"7d\""
        ))
    })
}
