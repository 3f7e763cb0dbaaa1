package io.ferrymq.interop;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One JVM for many scenarios: reads one JSON request per line on stdin
 * ({"id": n, "scenario": "...", "namesrv": "host:port", "args": {...}}) and answers each with one
 * line "@@RESULT {"id": n, "obs": {...}}" (or "error") on stdout. The marker keeps the answers
 * apart from anything a client library prints. Scenarios run one at a time.
 */
public final class Runner {
    static final String MARK = "@@RESULT ";
    static final Gson GSON = new GsonBuilder().serializeNulls().disableHtmlEscaping().create();

    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        out.println(MARK + "{\"ready\": true, \"client\": \"" + Scenarios.clientVersion() + "\"}");
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JsonObject req = JsonParser.parseString(line).getAsJsonObject();
            Map<String, Object> answer = new LinkedHashMap<>();
            answer.put("id", req.get("id").getAsLong());
            try {
                Scenario s = new Scenario(req.get("namesrv").getAsString(), req.getAsJsonObject("args"));
                answer.put("obs", Scenarios.run(req.get("scenario").getAsString(), s));
            } catch (Throwable e) {
                answer.put("error", Obs.error(e));
            }
            out.println(MARK + GSON.toJson(answer));
        }
    }
}
