//! `sluice ls`: what an output directory holds, for people and for scripts.

use std::collections::BTreeMap;

use clap::Args;
use connectors::{read::count_rows, CsvHeader, Dataset, ReadPlan};
use futures::stream::{self, StreamExt, TryStreamExt};
use serde_json::{json, Value};

use crate::catalog::CatalogTable;
use crate::config::heading;
use crate::config::{CatalogOptions, KerberosOptions, ReadOptions, StoreOptions};

/// Arguments of `sluice ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// The output directory: a path, file://, hdfs://, s3://, gs:// or az:// URL; with --catalog, a table name (db.table).
    #[arg(help = "The output directory (a path or URL), or a table name", long_help, help_heading = heading::SOURCE, display_order = 0)]
    pub url: String,
    /// How to read the dataset.
    #[command(flatten)]
    pub read: ReadOptions,
    /// Kerberos login for HDFS.
    #[command(flatten)]
    pub kerberos: KerberosOptions,
    /// Object store timeouts.
    #[command(flatten)]
    pub store: StoreOptions,
    /// The catalog a table name is looked up in.
    #[command(flatten)]
    pub catalog: CatalogOptions,
    /// Print JSON for scripts instead of a table.
    #[arg(long, help_heading = heading::OUTPUT)]
    pub json: bool,
}

/// One partition directory's totals.
#[derive(Default)]
struct PartitionTotals {
    values: Vec<Option<String>>,
    files: u64,
    rows: u64,
    bytes: u64,
}

/// Runs `sluice ls`.
pub async fn run(args: LsArgs) -> anyhow::Result<()> {
    let found = crate::catalog::lookup(&args.catalog, &args.url).await?;
    let url = found
        .as_ref()
        .map_or(args.url.as_str(), |t| t.read_url.as_str());
    let location = connectors::store::open(url)?;
    let mut options = args.read.dataset_options(false)?;
    if let Some(table) = &found {
        table.apply(&mut options);
    }
    let dataset = Dataset::open(location, options).await?;
    let split_rows = rows_per_split(&dataset).await?;
    let mut partitions: BTreeMap<String, PartitionTotals> = BTreeMap::new();
    for file in &dataset.files {
        let p = partitions.entry(file.partition_dir.clone()).or_default();
        p.values = file.partition_values.clone();
        p.files += 1;
        p.bytes += file.size;
    }
    for (split, rows) in dataset.splits.iter().zip(&split_rows) {
        partitions
            .entry(split.partition_dir.clone())
            .or_default()
            .rows += rows;
    }
    // Reading counted what the filter keeps; its statistics said what it skips.
    let filtered = dataset
        .options
        .row_filter
        .as_ref()
        .map(|f| (f.to_string(), connectors::row_filter::filter_counts()));
    let text = if args.json {
        let mut json = to_json(&dataset, &partitions);
        if let Some((expr, counts)) = &filtered {
            json["filter"] = json!({"expr": expr, "files": dataset.files.len(),
                "files_pruned": counts.files_pruned, "row_groups_read": counts.row_groups_read, "row_groups_pruned": counts.row_groups_pruned,
                "row_groups_pruned_bloom": counts.row_groups_pruned_bloom,
                "partition_dirs_pruned": counts.partition_dirs_pruned,
                "page_rows_pruned": counts.page_rows_pruned, "rows_dropped": counts.rows_filtered,
                "rows": counts.rows_kept});
        }
        if let Some(t) = &found {
            json["catalog"] = catalog_json(t);
        }
        serde_json::to_string_pretty(&json)? + "\n"
    } else {
        let mut text = String::new();
        if let Some(t) = &found {
            text.push_str(&catalog_line(t));
        }
        text.push_str(&table(&dataset, &partitions));
        if let Some((expr, c)) = &filtered {
            text.push_str(&format!(
                "filter: {expr}: {} partition directories left unlisted; {} files after partition pruning, {} of them skipped on statistics; row groups: {} read, {} skipped on statistics, {} on bloom filters; {} rows skipped on the page index; {} rows kept, {} dropped row by row\n",
                c.partition_dirs_pruned,
                dataset.files.len(),
                c.files_pruned,
                c.row_groups_read,
                c.row_groups_pruned,
                c.row_groups_pruned_bloom,
                c.page_rows_pruned,
                c.rows_kept,
                c.rows_filtered
            ));
        }
        text
    };
    write_stdout(&text)
}

/// Writes to stdout; a reader that went away (`| head`) is not an error.
pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::anyhow!("cannot write to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

/// Rows of every split: from metadata where known, else by reading.
async fn rows_per_split(dataset: &Dataset) -> anyhow::Result<Vec<u64>> {
    let plan = ReadPlan::new(dataset, None, 8192)?;
    let counts: Vec<u64> = stream::iter(dataset.splits.iter().map(|split| {
        let plan = &plan;
        async move {
            match split.rows {
                Some(rows) => Ok(rows),
                None => count_rows(&dataset.location, split, plan).await,
            }
        }
    }))
    .buffered(4)
    .try_collect()
    .await?;
    Ok(counts)
}

/// What the catalog said of a table, for `--json`.
fn catalog_json(t: &CatalogTable) -> Value {
    let outside: Vec<&str> = t
        .outside_root()
        .iter()
        .map(|p| p.location.as_str())
        .collect();
    json!({"uri": t.catalog, "table": t.name, "format": t.format, "location": t.location, "read": t.read_url,
        "partitions": t.partitions.as_ref().map(|p| p.len()), "outside_root": outside})
}

/// What the catalog said of a table, as the first line of `ls`.
fn catalog_line(t: &CatalogTable) -> String {
    let mut line = format!(
        "table {} in catalog {}: {} at {}\n",
        t.name, t.catalog, t.format, t.location
    );
    for p in t.outside_root() {
        line.push_str(&format!(
            "partition {} is outside the table root: {}\n",
            p.values.join("/"),
            p.location
        ));
    }
    line
}

fn to_json(dataset: &Dataset, partitions: &BTreeMap<String, PartitionTotals>) -> Value {
    let names: Vec<&str> = dataset
        .partition_fields
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let parts: Vec<Value> = partitions
        .iter()
        .map(|(path, p)| {
            let values: serde_json::Map<String, Value> = names
                .iter()
                .zip(&p.values)
                .map(|(n, v)| (n.to_string(), v.clone().map(Value::String).unwrap_or(Value::Null)))
                .collect();
            json!({"path": path, "values": values, "files": p.files, "rows": p.rows, "bytes": p.bytes})
        })
        .collect();
    let schema: Vec<Value> = dataset
        .schema()
        .fields()
        .iter()
        .map(|f| json!({"name": f.name(), "type": f.data_type().to_string(), "nullable": f.is_nullable(), "partition": names.contains(&f.name().as_str())}))
        .collect();
    json!({
        "url": dataset.location.url(),
        "complete": dataset.complete,
        "format": dataset.format.map(|f| f.as_str()),
        "format_detail": dataset.format_detail,
        "rows": partitions.values().map(|p| p.rows).sum::<u64>(),
        "files": dataset.files.len(),
        "bytes": dataset.files.iter().map(|f| f.size).sum::<u64>(),
        "tasks": dataset.splits.len(),
        "schema": schema,
        "partitions": parts,
        "in_flight": dataset.in_flight,
        "ignored": dataset.ignored,
        "table": dataset.table,
        "sink": dataset.sink,
        "csv_header": dataset.csv_header.map(|h| h.as_str()),
    })
}

/// What `ls` says of a dataset's state in its first line: a table's
/// version, a sink's batch, or whether its write is complete.
fn status(dataset: &Dataset) -> String {
    if let Some(table) = &dataset.table {
        let when = table
            .timestamp_ms
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(|t| format!(" committed {}", t.format("%Y-%m-%d %H:%M:%S UTC")))
            .unwrap_or_default();
        match table.kind {
            connectors::table::TableKind::Delta => {
                format!(
                    "delta table, version {}{when} ({})",
                    table.version, table.format_version
                )
            }
            connectors::table::TableKind::Iceberg => format!(
                "iceberg table, snapshot {}{when} ({})",
                table.version, table.format_version
            ),
        }
    } else if let Some(sink) = &dataset.sink {
        match sink.batch {
            Some(batch) => format!("streaming file sink, batch {batch}"),
            None => "streaming file sink, no batch committed yet".to_string(),
        }
    } else if dataset.complete {
        "complete (_SUCCESS)".to_string()
    } else if !dataset.in_flight.is_empty() {
        format!(
            "NOT complete: no _SUCCESS, in flight: {}",
            dataset.in_flight.join(", ")
        )
    } else {
        "no _SUCCESS marker (completeness unknown)".to_string()
    }
}

fn table(dataset: &Dataset, partitions: &BTreeMap<String, PartitionTotals>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let status = status(dataset);
    let format = match (dataset.format, &dataset.format_detail) {
        (Some(format), Some(detail)) => format!("{format} ({detail})"),
        (Some(format), None) => format.to_string(),
        (None, _) => "no data files".to_string(),
    };
    let _ = writeln!(out, "{}  {}  {}", dataset.location.url(), format, status);
    let width = partitions.keys().map(|k| k.len()).max().unwrap_or(0).max(9);
    let _ = writeln!(
        out,
        "{:width$}  {:>7}  {:>12}  {:>10}",
        "PARTITION", "FILES", "ROWS", "BYTES"
    );
    for (path, p) in partitions {
        let name = if path.is_empty() { "(root)" } else { path };
        let _ = writeln!(
            out,
            "{name:width$}  {:>7}  {:>12}  {:>10}",
            p.files,
            p.rows,
            human_bytes(p.bytes)
        );
    }
    let rows: u64 = partitions.values().map(|p| p.rows).sum();
    let bytes: u64 = dataset.files.iter().map(|f| f.size).sum();
    let _ = writeln!(
        out,
        "total: {} partitions, {} files, {} rows, {}, {} tasks",
        partitions.len(),
        dataset.files.len(),
        rows,
        human_bytes(bytes),
        dataset.splits.len()
    );
    let schema: Vec<String> = dataset
        .schema()
        .fields()
        .iter()
        .map(|f| format!("{} {}", f.name(), f.data_type()))
        .collect();
    let _ = writeln!(out, "schema: {}", schema.join(", "));
    if let Some(line) = csv_header_line(dataset) {
        let _ = writeln!(out, "{line}");
    }
    for ignored in &dataset.ignored {
        let _ = writeln!(out, "ignored: {} ({})", ignored.path, ignored.reason);
    }
    out
}

/// What `ls` says of a CSV dataset's header line: taken or not, and why.
fn csv_header_line(dataset: &Dataset) -> Option<String> {
    let header = dataset.options.format_options.csv_header.unwrap_or(false);
    let line = match (dataset.csv_header?, header) {
        (CsvHeader::Detected, _) => {
            "csv header: detected (each file's first line names the columns; \
             --csv-no-header reads it as data)"
        }
        (CsvHeader::None, _) => {
            "csv header: none (no header found in the data: every line is a row, \
             columns _c0, _c1, ...; --csv-header takes the first line as names)"
        }
        (CsvHeader::Given, true) => "csv header: given (--csv-header)",
        (CsvHeader::Given, false) => "csv header: given (--csv-no-header)",
    };
    Some(line.to_string())
}

/// Formats a byte count with a binary unit.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
