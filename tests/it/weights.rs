//! Weights of several sources (`--weights`) are positive normal numbers,
//! and shares are computed without overflow or underflow: `1e308,1e308`
//! is `1,1`, not two shares of nothing (issue 53); a weight that is 0,
//! negative, NaN, infinite or subnormal is one line, exit 64.

use std::path::Path;

use crate::common::{assert_one_line_error, parse_json, sluice};

/// The two partitions of examples/clicks (2,900 and 3,100 rows of
/// Parquet), each read as a source of its own.
fn sources() -> [String; 2] {
    let clicks = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/clicks");
    ["dt=2024-03-01", "dt=2024-03-02"].map(|p| clicks.join(p).display().to_string())
}

#[test]
fn huge_weights_share_an_epoch_as_equal_ones_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let summary = dir.path().join("summary.json");
    let [a, b] = sources();
    let summary_arg = summary.display().to_string();
    let args = [
        "train",
        &a,
        &b,
        "--weights",
        "1e308,1e308",
        "--epoch-rows",
        "1000",
        "--model",
        "none",
        "--quiet",
        "--summary-json",
        &summary_arg,
    ];
    sluice(args).success();
    let text = std::fs::read_to_string(&summary).expect("summary");
    let summary = parse_json(&text, "the summary");
    assert_eq!(summary["rows"], 1000, "{summary}");
    let rows: Vec<u64> = summary["sources"]
        .as_array()
        .expect("sources in the summary")
        .iter()
        .map(|s| s["rows"].as_u64().expect("rows of a source"))
        .collect();
    assert_eq!(rows, [500, 500], "{summary}");
}

#[test]
fn a_weight_that_is_not_a_positive_normal_number_is_one_line() {
    let [a, b] = sources();
    for (weights, shown) in [
        ("1e-320,1", "1e-320"),
        ("0,1", "0.0"),
        ("-1,1", "-1.0"),
        ("NaN,1", "NaN"),
        ("inf,1", "inf"),
        ("1e-300,1e300", "too small beside"),
    ] {
        let run = sluice([
            "train",
            &a,
            &b,
            &format!("--weights={weights}"),
            "--epoch-rows",
            "1000",
            "--model",
            "none",
        ]);
        assert_eq!(run.status.code(), Some(64), "--weights {weights}: {run}");
        assert_one_line_error(&run, &["--weights", shown]);
    }
}
