//! Spark/Hadoop/Hive output layout rules: names, partitions, commit markers.

pub mod names;
pub mod partition;
pub mod success;
