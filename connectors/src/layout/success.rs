//! The `_SUCCESS` marker: empty (FileOutputCommitter) or JSON (S3A and manifest committers).

use serde::Serialize;

/// What the `_SUCCESS` marker says about the job that wrote the output.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SuccessMarker {
    /// The committer named by a JSON marker (`magic`, `directory`, `manifest`...).
    pub committer: Option<String>,
    /// The job or marker name from a JSON marker.
    pub name: Option<String>,
}

impl SuccessMarker {
    /// Parses the marker's bytes; an empty or non-JSON marker still means success.
    pub fn parse(bytes: &[u8]) -> SuccessMarker {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
            return SuccessMarker::default();
        };
        let field = |k: &str| value.get(k).and_then(|v| v.as_str()).map(str::to_string);
        SuccessMarker {
            committer: field("committer"),
            name: field("name"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_json_markers() {
        assert_eq!(SuccessMarker::parse(b""), SuccessMarker::default());
        let m = SuccessMarker::parse(br#"{"name":"x","committer":"magic","filenames":[]}"#);
        assert_eq!(m.committer.as_deref(), Some("magic"));
    }
}
