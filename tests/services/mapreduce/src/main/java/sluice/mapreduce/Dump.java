package sluice.mapreduce;

import java.io.BufferedReader;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.BooleanWritable;
import org.apache.hadoop.io.ByteWritable;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.io.DoubleWritable;
import org.apache.hadoop.io.FloatWritable;
import org.apache.hadoop.io.IntWritable;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.io.SequenceFile;
import org.apache.hadoop.io.ShortWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.io.VIntWritable;
import org.apache.hadoop.io.VLongWritable;
import org.apache.hadoop.io.Writable;
import org.apache.hadoop.util.ReflectionUtils;

/**
 * What Hadoop's own reader finds in an output: every record of its part files
 * (top-level files not starting with `_` or `.`; `_temporary/` never) as one JSON
 * object per line, `key` and `value` as sluice's columns hold them: numbers as
 * numbers, Text as a string, booleans, BytesWritable as hex, other classes as the
 * hex of their serialized bytes, a NullWritable side left out. Lines of a text
 * output are split at the first tab, both sides strings.
 */
final class Dump {
  private Dump() {}

  /** Dumps OUT/NAME into OUT/dumps/NAME.jsonl; returns its entry of expected.json. */
  static Main.Json output(Path out, String name, String format) throws IOException {
    Path dir = out.resolve(name);
    List<Path> files;
    try (Stream<Path> listing = Files.list(dir)) {
      files = listing
          .filter(Files::isRegularFile)
          .filter(p -> !p.getFileName().toString().startsWith("_"))
          .filter(p -> !p.getFileName().toString().startsWith("."))
          .sorted()
          .collect(Collectors.toList());
    }
    List<String> lines = new ArrayList<>();
    Main.Json entry = new Main.Json();
    entry.put("dir", name);
    entry.put("format", format);
    List<Object> names = new ArrayList<>();
    for (Path file : files) {
      names.add(file.getFileName().toString());
      if (format.equals("text")) {
        text(file, lines);
      } else {
        sequenceFile(file, lines, entry);
      }
    }
    entry.put("files", names);
    entry.put("records", lines.size());
    entry.put("dump", "dumps/" + name + ".jsonl");
    Main.writeLines(out.resolve("dumps").resolve(name + ".jsonl"), lines);
    return entry;
  }

  static void text(Path file, List<String> lines) throws IOException {
    try (BufferedReader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
      String line;
      while ((line = r.readLine()) != null) {
        int tab = line.indexOf('\t');
        Main.Json row = new Main.Json();
        row.put("key", tab < 0 ? line : line.substring(0, tab));
        row.put("value", tab < 0 ? "" : line.substring(tab + 1));
        lines.add(row.toString());
      }
    }
  }

  static void sequenceFile(Path file, List<String> lines, Main.Json entry) throws IOException {
    Configuration conf = new Configuration();
    org.apache.hadoop.fs.Path path = new org.apache.hadoop.fs.Path(file.toUri());
    try (SequenceFile.Reader reader =
        new SequenceFile.Reader(conf, SequenceFile.Reader.file(path))) {
      entry.put("key_class", reader.getKeyClassName());
      entry.put("value_class", reader.getValueClassName());
      entry.put("compression", reader.getCompressionType().name());
      entry.put("codec",
          reader.isCompressed() ? reader.getCompressionCodec().getClass().getName() : null);
      Writable key = (Writable) ReflectionUtils.newInstance(reader.getKeyClass(), conf);
      Writable value = (Writable) ReflectionUtils.newInstance(reader.getValueClass(), conf);
      while (reader.next(key, value)) {
        Main.Json row = new Main.Json();
        if (!(key instanceof NullWritable)) {
          row.put("key", render(key));
        }
        if (!(value instanceof NullWritable)) {
          row.put("value", render(value));
        }
        lines.add(row.toString());
      }
    }
  }

  static Object render(Writable w) throws IOException {
    if (w instanceof Text) {
      return w.toString();
    } else if (w instanceof IntWritable) {
      return ((IntWritable) w).get();
    } else if (w instanceof LongWritable) {
      return ((LongWritable) w).get();
    } else if (w instanceof VIntWritable) {
      return ((VIntWritable) w).get();
    } else if (w instanceof VLongWritable) {
      return ((VLongWritable) w).get();
    } else if (w instanceof ShortWritable) {
      return ((ShortWritable) w).get();
    } else if (w instanceof ByteWritable) {
      return ((ByteWritable) w).get();
    } else if (w instanceof FloatWritable) {
      return ((FloatWritable) w).get();
    } else if (w instanceof DoubleWritable) {
      return ((DoubleWritable) w).get();
    } else if (w instanceof BooleanWritable) {
      return ((BooleanWritable) w).get();
    } else if (w instanceof BytesWritable) {
      BytesWritable b = (BytesWritable) w;
      return hex(b.getBytes(), b.getLength());
    }
    DataOutputBuffer buffer = new DataOutputBuffer();
    w.write(buffer);
    return hex(buffer.getData(), buffer.getLength());
  }

  static String hex(byte[] bytes, int length) {
    StringBuilder s = new StringBuilder();
    for (int i = 0; i < length; i++) {
      s.append(String.format("%02x", bytes[i] & 0xff));
    }
    return s.toString();
  }
}
