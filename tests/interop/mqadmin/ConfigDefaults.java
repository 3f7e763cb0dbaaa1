/*
 * Prints the configuration keys and default values that an Apache RocketMQ broker and NameServer
 * report (GET_BROKER_CONFIG / GET_NAMESRV_CONFIG: every field of the objects their Configuration
 * registers), as the release on the classpath defines them, with the ports that BrokerStartup and
 * NamesrvStartup set. Output: "[broker]" then "[namesrv]", each followed by sorted key=value lines
 * (java.util.Properties escaping). ferrymq's table of upstream keys is checked against this.
 */
import java.io.StringWriter;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.namesrv.NamesrvConfig;
import org.apache.rocketmq.remoting.netty.NettyClientConfig;
import org.apache.rocketmq.remoting.netty.NettyServerConfig;
import org.apache.rocketmq.store.config.MessageStoreConfig;

public final class ConfigDefaults {
    public static void main(String[] args) throws Exception {
        NettyServerConfig brokerNetty = new NettyServerConfig();
        brokerNetty.setListenPort(10911);  // BrokerStartup
        MessageStoreConfig store = new MessageStoreConfig();
        store.setHaListenPort(brokerNetty.getListenPort() + 1);  // BrokerStartup
        print("broker", new BrokerConfig(), brokerNetty, new NettyClientConfig(), store);
        NettyServerConfig namesrvNetty = new NettyServerConfig();
        namesrvNetty.setListenPort(9876);  // NamesrvStartup
        print("namesrv", new NamesrvConfig(), namesrvNetty);
    }

    private static void print(String section, Object... configs) throws Exception {
        Properties all = new Properties();
        for (Object config : configs) {
            all.putAll(MixAll.object2Properties(config));  // later objects win, as in Configuration
        }
        System.out.println("[" + section + "]");
        Map<String, String> sorted = new TreeMap<>();
        for (String key : all.stringPropertyNames()) {
            sorted.put(key, all.getProperty(key));
        }
        for (Map.Entry<String, String> e : sorted.entrySet()) {
            Properties one = new Properties();
            one.setProperty(e.getKey(), e.getValue());
            StringWriter w = new StringWriter();
            one.store(w, null);
            for (String line : w.toString().split("\n")) {
                if (!line.startsWith("#")) {
                    System.out.println(line.trim());
                }
            }
        }
    }
}
