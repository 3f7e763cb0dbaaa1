package io.ferrymq.bench;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.HdrHistogram.Recorder;

/** The closed loop of both generators: --threads threads, each one request in flight, until
 * --count messages or --seconds; the rate and request latency go to the RESULT map. */
final class ClosedLoop {
  private ClosedLoop() {}

  interface Request {
    /** One request; returns the number of messages it carried. */
    int send() throws Exception;
  }

  /** Runs the loop between optional MARK lines; returns the window's start (System.nanoTime). */
  static long run(Args args, Map<String, Object> out, Request request, int perRequest,
      boolean markStart, boolean markEnd) throws InterruptedException {
    int threads = (int) args.num("threads", 1);
    long count = args.num("count", 100_000);
    long seconds = args.num("seconds", 20);
    AtomicLong issued = new AtomicLong();
    AtomicLong sent = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    Recorder recorder = new Recorder(3);
    if (markStart) {
      Report.mark("start");
    }
    long start = System.nanoTime();
    long deadline = start + TimeUnit.SECONDS.toNanos(seconds);
    List<Thread> workers = new ArrayList<>();
    for (int t = 0; t < threads; t++) {
      Thread w = new Thread(() -> {
        while (issued.addAndGet(perRequest) <= count && System.nanoTime() < deadline) {
          long t0 = System.nanoTime();
          try {
            sent.addAndGet(request.send());
            recorder.recordValue((System.nanoTime() - t0) / 1000);
          } catch (Exception e) {
            failed.incrementAndGet();
            out.putIfAbsent("first_error", String.valueOf(e));
          }
        }
      });
      w.start();
      workers.add(w);
    }
    for (Thread w : workers) {
      w.join();
    }
    double elapsed = (System.nanoTime() - start) / 1e9;
    if (markEnd) {
      Report.mark("end");
    }
    Report.putRate(out, sent.get(), failed.get(), elapsed, recorder);
    return start;
  }
}
