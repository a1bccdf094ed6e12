package sluice.mapreduce;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * Damaged copies of a block-compressed (DefaultCodec) part file, each the one part
 * file of an output with _SUCCESS: `truncated` (cut inside its first block),
 * `wrong_codec` (its header names BZip2Codec) and `unknown_codec` (its header names a
 * class that does not exist).
 */
final class Corrupt {
  static final String DEFAULT = "org.apache.hadoop.io.compress.DefaultCodec";

  private Corrupt() {}

  static Main.Json write(Path out, String source) throws IOException {
    byte[] part = Files.readAllBytes(out.resolve(source).resolve("part-r-00000"));
    Main.Json entries = new Main.Json();
    int header = indexOf(part, DEFAULT.getBytes(StandardCharsets.US_ASCII)) + DEFAULT.length() + 20;
    if (header >= part.length / 2) {
      throw new IllegalStateException("the part file of " + source + " is too small to cut");
    }
    int cut = header + (part.length - header) / 2;
    entries.put("truncated", copy(out, "truncated", Arrays.copyOf(part, cut), DEFAULT));
    entries.put("wrong_codec", copy(out, "wrong_codec",
        rename(part, "org.apache.hadoop.io.compress.BZip2Codec"),
        "org.apache.hadoop.io.compress.BZip2Codec"));
    entries.put("unknown_codec", copy(out, "unknown_codec",
        rename(part, "org.example.NoSuchCodec"), "org.example.NoSuchCodec"));
    return entries;
  }

  static Main.Json copy(Path out, String name, byte[] bytes, String codec) throws IOException {
    Path dir = out.resolve("corrupt").resolve(name);
    Main.deleteTree(dir);
    Files.createDirectories(dir);
    Files.write(dir.resolve("part-r-00000"), bytes);
    Files.write(dir.resolve("_SUCCESS"), new byte[0]);
    return new Main.Json().put("dir", "corrupt/" + name).put("file", "part-r-00000")
        .put("codec", codec).put("bytes", bytes.length);
  }

  /** The header's codec class name (a Text: one-byte vint length, then UTF-8) replaced. */
  static byte[] rename(byte[] part, String codec) {
    byte[] from = DEFAULT.getBytes(StandardCharsets.US_ASCII);
    byte[] to = codec.getBytes(StandardCharsets.US_ASCII);
    int at = indexOf(part, from);
    if (at < 1 || part[at - 1] != from.length) {
      throw new IllegalStateException("no " + DEFAULT + " in the header");
    }
    byte[] result = new byte[part.length - from.length + to.length];
    System.arraycopy(part, 0, result, 0, at - 1);
    result[at - 1] = (byte) to.length;
    System.arraycopy(to, 0, result, at, to.length);
    System.arraycopy(part, at + from.length, result, at + to.length, part.length - at - from.length);
    return result;
  }

  static int indexOf(byte[] haystack, byte[] needle) {
    outer:
    for (int i = 0; i + needle.length <= haystack.length; i++) {
      for (int j = 0; j < needle.length; j++) {
        if (haystack[i + j] != needle[j]) {
          continue outer;
        }
      }
      return i;
    }
    throw new IllegalStateException("not found");
  }
}
