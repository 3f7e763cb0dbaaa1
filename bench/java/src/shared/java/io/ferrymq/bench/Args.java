package io.ferrymq.bench;

import java.util.HashMap;
import java.util.Map;

/** "--name value" pairs of a generator's command line (both generators: 4.x and 5.x client). */
final class Args {
  final Map<String, String> values = new HashMap<>();

  Args(String[] argv) {
    for (int i = 0; i < argv.length; i++) {
      String a = argv[i];
      if (!a.startsWith("--") || i + 1 >= argv.length) {
        throw new IllegalArgumentException("expected --name value pairs, got " + a);
      }
      values.put(a.substring(2), argv[++i]);
    }
  }

  String str(String name, String dflt) {
    return values.getOrDefault(name, dflt);
  }

  long num(String name, long dflt) {
    String v = values.get(name);
    return v == null ? dflt : Long.parseLong(v);
  }

  /** A message body of --size bytes (1 KiB): letters, which no codec shrinks to nothing. */
  byte[] body() {
    byte[] b = new byte[(int) num("size", 1024)];
    for (int i = 0; i < b.length; i++) {
      b[i] = (byte) ('a' + i % 26);
    }
    return b;
  }
}
