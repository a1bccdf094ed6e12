"""Facts about a benchmark dataset, as JSON: rows, files, row groups, columns, on-disk
Parquet bytes and decoded Arrow bytes (pyarrow's Table.nbytes, read one file at a time).

    python dataset_meta.py DIR > meta.json
"""
import json
import os
import sys

import pyarrow.parquet as pq


def main():
    root = sys.argv[1]
    files = sorted(os.path.join(root, f) for f in os.listdir(root)
                   if f.endswith(".parquet") and not f.startswith(("_", ".")))
    rows = groups = disk = arrow = 0
    cols = None
    for f in files:
        pf = pq.ParquetFile(f)
        rows += pf.metadata.num_rows
        groups += pf.metadata.num_row_groups
        cols = pf.metadata.num_columns
        disk += os.path.getsize(f)
        arrow += pf.read().nbytes
    print(json.dumps({"rows": rows, "files": len(files), "row_groups": groups, "columns": cols,
                      "parquet_bytes": disk, "arrow_bytes": arrow, "compression": "snappy"}))


if __name__ == "__main__":
    main()
