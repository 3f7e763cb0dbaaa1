package io.ferrymq.interop;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.ClientConfig;

/** The arguments of one scenario run, and the client settings every client of it shares. */
final class Scenario {
    private static final AtomicInteger INSTANCES = new AtomicInteger();

    final String namesrv;
    final JsonObject args;

    Scenario(String namesrv, JsonObject args) {
        this.namesrv = namesrv;
        this.args = args;
    }

    String str(String name) {
        return args.get(name).getAsString();
    }

    String str(String name, String fallback) {
        JsonElement v = args.get(name);
        return v == null || v.isJsonNull() ? fallback : v.getAsString();
    }

    int integer(String name, int fallback) {
        JsonElement v = args.get(name);
        return v == null ? fallback : v.getAsInt();
    }

    boolean bool(String name, boolean fallback) {
        JsonElement v = args.get(name);
        return v == null ? fallback : v.getAsBoolean();
    }

    long timeoutMs() {
        return integer("timeout_s", 60) * 1000L;
    }

    List<String> strings(String name) {
        List<String> out = new ArrayList<>();
        JsonElement v = args.get(name);
        if (v != null) {
            v.getAsJsonArray().forEach(e -> out.add(e.getAsString()));
        }
        return out;
    }

    /** Every client gets its own instance name: clients of two clusters must not share an
     * MQClientInstance (it is keyed by ip@instanceName and keeps the first NameServer). */
    <T extends ClientConfig> T configure(T client) {
        client.setNamesrvAddr(namesrv);
        client.setInstanceName("scn-" + INSTANCES.incrementAndGet());
        return client;
    }
}
