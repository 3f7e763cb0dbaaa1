package io.ferrymq.bench;

import java.util.LinkedHashMap;
import java.util.Map;

import org.HdrHistogram.Histogram;
import org.HdrHistogram.Recorder;

/**
 * What a generator prints for bench/vs_apache.py: "MARK start" / "MARK end" around the measured
 * window and one "RESULT {json}" line. Shared by the 4.x generator (bench/java) and the 5.x one
 * (bench/java5), so both speak the runner's protocol the same way.
 */
final class Report {
  private Report() {}

  /** "MARK start" / "MARK end" on stdout: the runner samples the servers' CPU at these lines, so
   * JVM start-up, warm-up and connection set-up are outside the measured window. */
  static void mark(String what) {
    System.out.println("MARK " + what);
    System.out.flush();
  }

  static void result(Map<String, Object> out) {
    System.out.println("RESULT " + toJson(out));
    System.out.flush();
  }

  static void putRate(
      Map<String, Object> out, long sent, long failed, double elapsed, Recorder recorder) {
    out.put("messages", sent);
    out.put("failed_requests", failed);
    out.put("elapsed_s", elapsed);
    out.put("msgs_per_s", sent / elapsed);
    putLatency(out, "request_latency_us", recorder.getIntervalHistogram());
  }

  static void putLatency(Map<String, Object> out, String key, Histogram h) {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("count", h.getTotalCount());
    m.put("p50", h.getValueAtPercentile(50));
    m.put("p99", h.getValueAtPercentile(99));
    m.put("p999", h.getValueAtPercentile(99.9));
    m.put("max", h.getMaxValue());
    out.put(key, m);
  }

  static String toJson(Object o) {
    if (o instanceof Map<?, ?> m) {
      StringBuilder sb = new StringBuilder("{");
      boolean first = true;
      for (Map.Entry<?, ?> e : m.entrySet()) {
        if (!first) {
          sb.append(',');
        }
        first = false;
        sb.append(toJson(String.valueOf(e.getKey()))).append(':').append(toJson(e.getValue()));
      }
      return sb.append('}').toString();
    }
    if (o instanceof Number n) {
      double d = n.doubleValue();
      return Double.isFinite(d) ? n.toString() : "null";
    }
    if (o == null) {
      return "null";
    }
    String s = String.valueOf(o);
    StringBuilder sb = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      switch (ch) {
        case '"' -> sb.append("\\\"");
        case '\\' -> sb.append("\\\\");
        case '\n' -> sb.append("\\n");
        default -> {
          if (ch < 0x20) {
            sb.append(String.format("\\u%04x", (int) ch));
          } else {
            sb.append(ch);
          }
        }
      }
    }
    return sb.append('"').toString();
  }
}
