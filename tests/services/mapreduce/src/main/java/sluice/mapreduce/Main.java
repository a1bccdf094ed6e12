package sluice.mapreduce;

import java.io.File;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Stream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.BooleanWritable;
import org.apache.hadoop.io.ByteWritable;
import org.apache.hadoop.io.BytesWritable;
import org.apache.hadoop.io.DoubleWritable;
import org.apache.hadoop.io.FloatWritable;
import org.apache.hadoop.io.IntWritable;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.MD5Hash;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.io.SequenceFile;
import org.apache.hadoop.io.ShortWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.io.VIntWritable;
import org.apache.hadoop.io.VLongWritable;
import org.apache.hadoop.io.Writable;
import org.apache.hadoop.io.compress.BZip2Codec;
import org.apache.hadoop.io.compress.CompressionCodec;
import org.apache.hadoop.io.compress.DefaultCodec;
import org.apache.hadoop.io.compress.GzipCodec;
import org.apache.hadoop.io.compress.Lz4Codec;
import org.apache.hadoop.io.compress.SnappyCodec;
import org.apache.hadoop.io.compress.ZStandardCodec;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.OutputFormat;
import org.apache.hadoop.mapreduce.Reducer;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.MultipleOutputs;
import org.apache.hadoop.mapreduce.lib.output.SequenceFileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.TextOutputFormat;
import org.apache.hadoop.util.NativeCodeLoader;
import org.apache.hadoop.util.VersionInfo;

/**
 * Runs real MapReduce jobs with Hadoop's LocalJobRunner on the local filesystem
 * and dumps what they wrote with SequenceFile.Reader (see ../../../../../mapreduce.sh).
 *
 * <p>Usage: Main OUT WORK VERSION. Writes every output under OUT/NAME/, its records
 * as JSON lines under OUT/dumps/NAME.jsonl, and last OUT/expected.json (VERSION and,
 * per output, its classes, compression, files and record count). WORK holds the
 * generated input and Hadoop's scratch directories.
 */
public final class Main {
  private static final String[] CODECS = {"deflate", "gzip", "bzip2", "snappy", "lz4"};

  private Main() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: Main OUT WORK VERSION");
      System.exit(2);
    }
    Path out = Paths.get(args[0]).toAbsolutePath();
    Path work = Paths.get(args[1]).toAbsolutePath();
    Files.createDirectories(out.resolve("dumps"));
    Inputs inputs = Inputs.write(work.resolve("input"));
    Runner runner = new Runner(out, work);
    Json outputs = new Json();

    // (a) word count, TextOutputFormat.
    runner.wordCount("text", TextOutputFormat.class, null, null, 2, inputs.words);
    outputs.put("text", Dump.output(out, "text", "text"));

    // (b) the same as SequenceFiles: uncompressed, then RECORD and BLOCK with each
    // codec Hadoop runs in pure Java.
    runner.wordCount("seq_none", SequenceFileOutputFormat.class, null, null, 2, inputs.words);
    outputs.put("seq_none", Dump.output(out, "seq_none", "sequencefile"));
    for (String type : new String[] {"record", "block"}) {
      for (String codec : CODECS) {
        String name = "seq_" + type + "_" + codec;
        runner.wordCount(name, SequenceFileOutputFormat.class,
            SequenceFile.CompressionType.valueOf(type.toUpperCase()), codecClass(codec), 2,
            inputs.words);
        outputs.put(name, Dump.output(out, name, "sequencefile"));
      }
    }
    // ZStandardCodec has no pure-Java implementation in Hadoop: it needs libhadoop
    // built with zstd, which Maven Central does not ship.
    Json notWritten = new Json();
    if (NativeCodeLoader.isNativeCodeLoaded() && NativeCodeLoader.buildSupportsZstd()) {
      for (String type : new String[] {"record", "block"}) {
        String name = "seq_" + type + "_zstd";
        runner.wordCount(name, SequenceFileOutputFormat.class,
            SequenceFile.CompressionType.valueOf(type.toUpperCase()), ZStandardCodec.class, 2,
            inputs.words);
        outputs.put(name, Dump.output(out, name, "sequencefile"));
      }
    } else {
      notWritten.put("seq_record_zstd", "ZStandardCodec needs libhadoop with zstd (not loaded)");
      notWritten.put("seq_block_zstd", "ZStandardCodec needs libhadoop with zstd (not loaded)");
    }

    // Keys and values of every Writable sluice maps to a column, one job each.
    for (Typed.Kind kind : Typed.Kind.values()) {
      String name = "types_" + kind.name().toLowerCase();
      runner.typed(name, kind, inputs.ids);
      outputs.put(name, Dump.output(out, name, "sequencefile"));
    }

    // (c) a map-only job: part-m-00000, one per input file.
    runner.mapOnly("map_only", inputs.words, null, null);
    outputs.put("map_only", Dump.output(out, "map_only", "sequencefile"));

    // (d) MultipleOutputs: short-r-0000N and long-r-0000N beside part-r-0000N.
    runner.multipleOutputs("multiple", inputs.words);
    outputs.put("multiple", Dump.output(out, "multiple", "sequencefile"));

    // (e) a few MB in one file: uncompressed, a sync marker every 100 KB (Hadoop 3's
    // SYNC_INTERVAL, 5 * 1024 * SYNC_SIZE; Hadoop 1's was 2000 bytes), and the same
    // block-compressed in blocks of 64 KB (a sync marker before each).
    runner.big("big", inputs.big, null, null);
    outputs.put("big", Dump.output(out, "big", "sequencefile"));
    runner.big("big_block", inputs.big, SequenceFile.CompressionType.BLOCK, DefaultCodec.class);
    outputs.put("big_block", Dump.output(out, "big_block", "sequencefile"));

    // An output as a running job leaves it: reducer 0 committed (algorithm v2: in
    // the output directory), reducer 1 writing under _temporary, no _SUCCESS.
    String temporary = runner.running("running", inputs.words);
    Json running = Dump.output(out, "running", "sequencefile");
    running.put("temporary", temporary);
    running.put("temporary_bytes", Files.size(out.resolve("running").resolve(temporary)));
    outputs.put("running", running);

    // (f) damaged copies of a block-compressed part file.
    Json corrupt = Corrupt.write(out, "seq_block_deflate");

    Json expected = new Json();
    expected.put("version", args[2]);
    expected.put("hadoop", VersionInfo.getVersion());
    expected.put("outputs", outputs);
    expected.put("not_written", notWritten);
    expected.put("corrupt", corrupt);
    Path tmp = out.resolve("expected.json.tmp");
    Files.writeString(tmp, expected.toString() + "\n");
    Files.move(tmp, out.resolve("expected.json"), StandardCopyOption.ATOMIC_MOVE);
    System.err.println("mapreduce: wrote " + out);
  }

  static Class<? extends CompressionCodec> codecClass(String name) {
    switch (name) {
      case "deflate": return DefaultCodec.class;
      case "gzip": return GzipCodec.class;
      case "bzip2": return BZip2Codec.class;
      case "snappy": return SnappyCodec.class;
      case "lz4": return Lz4Codec.class;
      default: throw new IllegalArgumentException(name);
    }
  }

  /** The generated input of the jobs. */
  static final class Inputs {
    Path words;
    Path ids;
    Path big;

    static final int BIG_ROWS = 40_000;
    static final int TYPED_ROWS = 500;

    static Inputs write(Path dir) throws IOException {
      Inputs inputs = new Inputs();
      inputs.words = dir.resolve("words");
      inputs.ids = dir.resolve("ids");
      inputs.big = dir.resolve("big");
      for (Path p : new Path[] {inputs.words, inputs.ids, inputs.big}) {
        Files.createDirectories(p);
      }
      // Words of skewed frequencies, some of them not ASCII.
      List<String> vocabulary = new ArrayList<>();
      String[] special = {"café", "naïve", "straße", "日本語", "emoji😀", "ünïcödé", "a", "bb"};
      for (String s : special) {
        vocabulary.add(s);
      }
      for (int j = 0; vocabulary.size() < 1500; j++) {
        vocabulary.add("w" + Integer.toString(j * 7919 % 1_000_003, 36)
            + (j % 5 == 0 ? "-long-suffix-" + j : ""));
      }
      Random random = new Random(54);
      for (int f = 0; f < 3; f++) {
        StringBuilder text = new StringBuilder();
        for (int line = 0; line < 1500; line++) {
          for (int w = 0; w < 8; w++) {
            double u = random.nextDouble();
            text.append(w == 0 ? "" : " ").append(vocabulary.get((int) (vocabulary.size() * u * u * u)));
          }
          text.append('\n');
        }
        Files.writeString(inputs.words.resolve("words-" + f + ".txt"), text.toString());
      }
      StringBuilder ids = new StringBuilder();
      for (int i = 0; i < TYPED_ROWS; i++) {
        ids.append(i).append('\n');
      }
      Files.writeString(inputs.ids.resolve("ids.txt"), ids.toString());
      StringBuilder big = new StringBuilder();
      for (int i = 0; i < BIG_ROWS; i++) {
        big.append(i).append('\n');
      }
      Files.writeString(inputs.big.resolve("ids.txt"), big.toString());
      return inputs;
    }
  }

  /** Runs the jobs, each into OUT/NAME. */
  static final class Runner {
    final Path out;
    final Path work;

    Runner(Path out, Path work) {
      this.out = out;
      this.work = work;
    }

    Configuration conf() {
      Configuration conf = new Configuration();
      conf.set("mapreduce.framework.name", "local");
      conf.set("fs.defaultFS", "file:///");
      conf.set("hadoop.tmp.dir", work.resolve("hadoop-tmp").toString());
      conf.set("mapreduce.cluster.local.dir", work.resolve("local").toString());
      conf.setInt("mapreduce.task.io.sort.mb", 16);
      // waitForCompletion polls every 5 s by default: most of a small job's time.
      conf.setInt("mapreduce.client.completion.pollinterval", 50);
      conf.setInt("mapreduce.client.progressmonitor.pollinterval", 50);
      return conf;
    }

    Job job(Configuration conf, String name, Path input) throws IOException {
      Path dir = out.resolve(name);
      deleteTree(dir);
      Job job = Job.getInstance(conf, "sluice-" + name);
      job.setJarByClass(Main.class);
      FileInputFormat.addInputPath(job, new org.apache.hadoop.fs.Path(input.toUri()));
      FileOutputFormat.setOutputPath(job, new org.apache.hadoop.fs.Path(dir.toUri()));
      return job;
    }

    static void compress(Job job, SequenceFile.CompressionType type,
        Class<? extends CompressionCodec> codec) {
      if (type == null) {
        return;
      }
      FileOutputFormat.setCompressOutput(job, true);
      FileOutputFormat.setOutputCompressorClass(job, codec);
      SequenceFileOutputFormat.setOutputCompressionType(job, type);
    }

    static void finish(Job job) throws Exception {
      if (!job.waitForCompletion(false)) {
        throw new IllegalStateException(job.getJobName() + " failed: " + job.getStatus());
      }
    }

    @SuppressWarnings("rawtypes")
    void wordCount(String name, Class<? extends OutputFormat> format,
        SequenceFile.CompressionType type, Class<? extends CompressionCodec> codec, int reduces,
        Path input) throws Exception {
      Job job = job(conf(), name, input);
      job.setMapperClass(WordCount.Split.class);
      job.setCombinerClass(WordCount.Sum.class);
      job.setReducerClass(WordCount.Sum.class);
      job.setOutputKeyClass(Text.class);
      job.setOutputValueClass(IntWritable.class);
      job.setOutputFormatClass(format);
      job.setNumReduceTasks(reduces);
      compress(job, type, codec);
      finish(job);
    }

    void typed(String name, Typed.Kind kind, Path input) throws Exception {
      Configuration conf = conf();
      conf.set(Typed.KIND, kind.name());
      Job job = job(conf, name, input);
      job.setMapperClass(Typed.Emit.class);
      job.setReducerClass(Reducer.class);
      job.setOutputKeyClass(kind.key);
      job.setOutputValueClass(kind.value);
      job.setOutputFormatClass(SequenceFileOutputFormat.class);
      job.setNumReduceTasks(1);
      compress(job, kind.type, kind.codec);
      finish(job);
    }

    void mapOnly(String name, Path input, SequenceFile.CompressionType type,
        Class<? extends CompressionCodec> codec) throws Exception {
      Job job = job(conf(), name, input);
      job.setMapperClass(Mapper.class);
      job.setOutputKeyClass(LongWritable.class);
      job.setOutputValueClass(Text.class);
      job.setOutputFormatClass(SequenceFileOutputFormat.class);
      job.setNumReduceTasks(0);
      compress(job, type, codec);
      finish(job);
    }

    void multipleOutputs(String name, Path input) throws Exception {
      Job job = job(conf(), name, input);
      job.setMapperClass(WordCount.Split.class);
      job.setCombinerClass(WordCount.Sum.class);
      job.setReducerClass(WordCount.Named.class);
      job.setOutputKeyClass(Text.class);
      job.setOutputValueClass(IntWritable.class);
      job.setOutputFormatClass(SequenceFileOutputFormat.class);
      job.setNumReduceTasks(2);
      for (String named : new String[] {"short", "long"}) {
        MultipleOutputs.addNamedOutput(job, named, SequenceFileOutputFormat.class, Text.class,
            IntWritable.class);
      }
      finish(job);
    }

    void big(String name, Path input, SequenceFile.CompressionType type,
        Class<? extends CompressionCodec> codec) throws Exception {
      Configuration conf = conf();
      conf.setInt("io.seqfile.compress.blocksize", 64 * 1024);
      Job job = job(conf, name, input);
      job.setMapperClass(Big.Emit.class);
      job.setOutputKeyClass(LongWritable.class);
      job.setOutputValueClass(Text.class);
      job.setOutputFormatClass(SequenceFileOutputFormat.class);
      job.setNumReduceTasks(0);
      compress(job, type, codec);
      finish(job);
    }

    /**
     * A word count whose second reducer blocks, its records written, until released:
     * OUT/NAME is a copy of the output taken while it waits. Returns the path of the
     * in-flight part file in that copy, relative to it.
     */
    String running(String name, Path input) throws Exception {
      Path flags = work.resolve("running-flags");
      deleteTree(flags);
      Files.createDirectories(flags);
      Configuration conf = conf();
      conf.set(Blocking.FLAGS, flags.toString());
      conf.setInt("mapreduce.fileoutputcommitter.algorithm.version", 2);
      String scratch = name + "-job";
      Job job = job(conf, scratch, input);
      job.setMapperClass(WordCount.Split.class);
      job.setCombinerClass(WordCount.Sum.class);
      job.setReducerClass(Blocking.class);
      job.setOutputKeyClass(Text.class);
      job.setOutputValueClass(IntWritable.class);
      job.setOutputFormatClass(SequenceFileOutputFormat.class);
      job.setNumReduceTasks(2);
      job.submit();
      Path blocked = flags.resolve("blocked");
      long deadline = System.currentTimeMillis() + 300_000;
      while (!Files.exists(blocked)) {
        if (job.isComplete() || System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("the running job never blocked: " + job.getStatus());
        }
        Thread.sleep(50);
      }
      Path dir = out.resolve(name);
      deleteTree(dir);
      copyTree(out.resolve(scratch), dir);
      Files.createFile(flags.resolve("release"));
      finish(job);
      deleteTree(out.resolve(scratch));
      if (Files.exists(dir.resolve("_SUCCESS"))) {
        throw new IllegalStateException("the copy of the running job has _SUCCESS");
      }
      try (Stream<Path> files = Files.walk(dir.resolve("_temporary"))) {
        Path part = files
            .filter(p -> p.getFileName().toString().equals("part-r-00001"))
            .findFirst()
            .orElseThrow(() -> new IllegalStateException("no part-r-00001 under _temporary"));
        if (Files.size(part) == 0) {
          throw new IllegalStateException(part + " is empty");
        }
        if (!Files.exists(dir.resolve("part-r-00000"))) {
          throw new IllegalStateException("reducer 0 did not commit part-r-00000");
        }
        return dir.relativize(part).toString();
      }
    }
  }

  static void deleteTree(Path dir) throws IOException {
    if (!Files.exists(dir)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(dir)) {
      paths.sorted((a, b) -> b.compareTo(a)).map(Path::toFile).forEach(File::delete);
    }
  }

  static void copyTree(Path from, Path to) throws IOException {
    try (Stream<Path> paths = Files.walk(from)) {
      for (Path p : (Iterable<Path>) paths::iterator) {
        Path target = to.resolve(from.relativize(p).toString());
        if (Files.isDirectory(p)) {
          Files.createDirectories(target);
        } else {
          Files.copy(p, target);
        }
      }
    }
  }

  /** Word count: split lines at spaces, sum the ones. */
  public static final class WordCount {
    private WordCount() {}

    public static final class Split extends Mapper<LongWritable, Text, Text, IntWritable> {
      private static final IntWritable ONE = new IntWritable(1);
      private final Text word = new Text();

      @Override
      protected void map(LongWritable offset, Text line, Context context)
          throws IOException, InterruptedException {
        for (String w : line.toString().split(" ")) {
          if (!w.isEmpty()) {
            word.set(w);
            context.write(word, ONE);
          }
        }
      }
    }

    public static class Sum extends Reducer<Text, IntWritable, Text, IntWritable> {
      private final IntWritable total = new IntWritable();

      protected int sum(Iterable<IntWritable> counts) {
        int n = 0;
        for (IntWritable c : counts) {
          n += c.get();
        }
        return n;
      }

      @Override
      protected void reduce(Text word, Iterable<IntWritable> counts, Context context)
          throws IOException, InterruptedException {
        total.set(sum(counts));
        context.write(word, total);
      }
    }

    /** Every count to the job's output, and again to `short` or `long` by the word's length. */
    public static final class Named extends Sum {
      private MultipleOutputs<Text, IntWritable> outputs;
      private final IntWritable total = new IntWritable();

      @Override
      protected void setup(Context context) {
        outputs = new MultipleOutputs<>(context);
      }

      @Override
      protected void reduce(Text word, Iterable<IntWritable> counts, Context context)
          throws IOException, InterruptedException {
        total.set(sum(counts));
        context.write(word, total);
        outputs.write(word.toString().length() <= 4 ? "short" : "long", word, total);
      }

      @Override
      protected void cleanup(Context context) throws IOException, InterruptedException {
        outputs.close();
      }
    }
  }

  /** The word count's reducer 1 waits in cleanup (all its records written) until released. */
  public static final class Blocking extends WordCount.Sum {
    static final String FLAGS = "sluice.running.flags";

    @Override
    protected void cleanup(Context context) throws IOException, InterruptedException {
      if (context.getTaskAttemptID().getTaskID().getId() != 1) {
        return;
      }
      Path flags = Paths.get(context.getConfiguration().get(FLAGS));
      Files.createFile(flags.resolve("blocked"));
      long deadline = System.currentTimeMillis() + 300_000;
      while (!Files.exists(flags.resolve("release"))) {
        if (System.currentTimeMillis() > deadline) {
          throw new IOException("never released");
        }
        Thread.sleep(50);
      }
    }
  }

  /** The big file: id, and a line of text that says it. */
  public static final class Big {
    private Big() {}

    public static final class Emit extends Mapper<LongWritable, Text, LongWritable, Text> {
      private final LongWritable id = new LongWritable();
      private final Text text = new Text();

      @Override
      protected void map(LongWritable offset, Text line, Context context)
          throws IOException, InterruptedException {
        long i = Long.parseLong(line.toString().trim());
        id.set(i);
        text.set("record " + i + " of the big SequenceFile: " + "abcdefghij".repeat((int) (i % 7)));
        context.write(id, text);
      }
    }
  }

  /** One job per pair of Writable classes: record i of 0..500 as a key and a value. */
  public static final class Typed {
    static final String KIND = "sluice.typed.kind";

    private Typed() {}

    enum Kind {
      LONG_DOUBLE(LongWritable.class, DoubleWritable.class, SequenceFile.CompressionType.RECORD,
          GzipCodec.class),
      BYTES(BytesWritable.class, BytesWritable.class, SequenceFile.CompressionType.BLOCK,
          DefaultCodec.class),
      NULL_KEY(NullWritable.class, Text.class, null, null),
      NULL_VALUE(LongWritable.class, NullWritable.class, null, null),
      BOOL_FLOAT(BooleanWritable.class, FloatWritable.class, null, null),
      VINT_VLONG(VIntWritable.class, VLongWritable.class, null, null),
      SHORT_BYTE(ShortWritable.class, ByteWritable.class, SequenceFile.CompressionType.BLOCK,
          SnappyCodec.class),
      INT_OTHER(IntWritable.class, MD5Hash.class, null, null);

      final Class<? extends Writable> key;
      final Class<? extends Writable> value;
      final SequenceFile.CompressionType type;
      final Class<? extends CompressionCodec> codec;

      Kind(Class<? extends Writable> key, Class<? extends Writable> value,
          SequenceFile.CompressionType type, Class<? extends CompressionCodec> codec) {
        this.key = key;
        this.value = value;
        this.type = type;
        this.codec = codec;
      }
    }

    static byte[] bytes(int i, int n) {
      byte[] b = new byte[n];
      for (int j = 0; j < n; j++) {
        b[j] = (byte) (i * 31 + j * 17);
      }
      return b;
    }

    static Writable key(Kind kind, int i) {
      switch (kind) {
        case LONG_DOUBLE: return new LongWritable((i - 250) * 1_000_000_000_007L);
        case BYTES: return new BytesWritable(bytes(i, 1 + i % 9));
        case NULL_KEY: return NullWritable.get();
        case NULL_VALUE: return new LongWritable(i * 3L - 700);
        case BOOL_FLOAT: return new BooleanWritable(i % 3 == 0);
        case VINT_VLONG: return new VIntWritable((i - 250) * 8_000_000);
        case SHORT_BYTE: return new ShortWritable((short) (i * 131 - 32000));
        case INT_OTHER: return new IntWritable(i - 250);
        default: throw new IllegalArgumentException(kind.name());
      }
    }

    static Writable value(Kind kind, int i) {
      switch (kind) {
        case LONG_DOUBLE: return new DoubleWritable(i * 0.1 - 17.3);
        case BYTES: return new BytesWritable(bytes(i * 7, i % 10 == 0 ? 0 : i % 37));
        case NULL_KEY: return new Text("line " + i + (i % 4 == 0 ? " — ünïcödé" : ""));
        case NULL_VALUE: return NullWritable.get();
        case BOOL_FLOAT: return new FloatWritable(i * 0.37f - 50f);
        case VINT_VLONG: return new VLongWritable((i - 250) * 37_000_000_000_000L);
        case SHORT_BYTE: return new ByteWritable((byte) (i - 128));
        case INT_OTHER: return MD5Hash.digest("value " + i);
        default: throw new IllegalArgumentException(kind.name());
      }
    }

    public static final class Emit extends Mapper<LongWritable, Text, Writable, Writable> {
      @Override
      protected void map(LongWritable offset, Text line, Context context)
          throws IOException, InterruptedException {
        Kind kind = Kind.valueOf(context.getConfiguration().get(KIND));
        int i = Integer.parseInt(line.toString().trim());
        context.write(key(kind, i), value(kind, i));
      }
    }
  }

  /** A small JSON object writer (insertion order kept). */
  static final class Json {
    private final Map<String, Object> fields = new LinkedHashMap<>();

    Json put(String key, Object value) {
      fields.put(key, value);
      return this;
    }

    @Override
    public String toString() {
      StringBuilder s = new StringBuilder();
      write(s, this);
      return s.toString();
    }

    static void write(StringBuilder s, Object value) {
      if (value == null) {
        s.append("null");
      } else if (value instanceof Json) {
        s.append('{');
        boolean first = true;
        for (Map.Entry<String, Object> e : ((Json) value).fields.entrySet()) {
          if (!first) {
            s.append(", ");
          }
          first = false;
          string(s, e.getKey());
          s.append(": ");
          write(s, e.getValue());
        }
        s.append('}');
      } else if (value instanceof List) {
        s.append('[');
        boolean first = true;
        for (Object o : (List<?>) value) {
          if (!first) {
            s.append(", ");
          }
          first = false;
          write(s, o);
        }
        s.append(']');
      } else if (value instanceof String) {
        string(s, (String) value);
      } else if (value instanceof Double || value instanceof Float) {
        double d = ((Number) value).doubleValue();
        if (Double.isNaN(d) || Double.isInfinite(d)) {
          string(s, Double.toString(d));
        } else {
          s.append(Double.toString(d));
        }
      } else {
        s.append(value);
      }
    }

    static void string(StringBuilder s, String text) {
      s.append('"');
      for (int i = 0; i < text.length(); i++) {
        char c = text.charAt(i);
        switch (c) {
          case '"': s.append("\\\""); break;
          case '\\': s.append("\\\\"); break;
          case '\n': s.append("\\n"); break;
          case '\r': s.append("\\r"); break;
          case '\t': s.append("\\t"); break;
          default:
            if (c < 0x20) {
              s.append(String.format("\\u%04x", (int) c));
            } else {
              s.append(c);
            }
        }
      }
      s.append('"');
    }
  }

  static void writeLines(Path path, List<String> lines) throws IOException {
    try (Writer w = Files.newBufferedWriter(path, StandardCharsets.UTF_8)) {
      for (String line : lines) {
        w.write(line);
        w.write('\n');
      }
    }
  }
}
