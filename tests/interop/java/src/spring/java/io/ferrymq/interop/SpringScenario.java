package io.ferrymq.interop;

import com.google.gson.GsonBuilder;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.spring.annotation.RocketMQMessageListener;
import org.apache.rocketmq.spring.core.RocketMQListener;
import org.apache.rocketmq.spring.core.RocketMQTemplate;
import org.apache.rocketmq.spring.support.RocketMQHeaders;
import org.springframework.boot.Banner;
import org.springframework.boot.SpringApplication;
import org.springframework.boot.WebApplicationType;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.messaging.Message;
import org.springframework.messaging.support.MessageBuilder;
import org.springframework.stereotype.Component;

/**
 * What a Spring Boot application sees: RocketMQTemplate.syncSend of messages with a tag, keys and
 * a user header, one with another tag, and what a {@code @RocketMQMessageListener} subscribed to
 * the first tag receives. Arguments: namesrv topic group count timeoutMs. Prints one line
 * "@@RESULT {json}" and exits.
 */
@SpringBootApplication
public class SpringScenario {
    static final List<MessageExt> RECEIVED = new CopyOnWriteArrayList<>();
    static CountDownLatch latch;

    @Component
    @RocketMQMessageListener(
        topic = "${scenario.topic}",
        consumerGroup = "${scenario.group}",
        selectorExpression = "TagS")
    public static class Listener implements RocketMQListener<MessageExt> {
        @Override
        public void onMessage(MessageExt msg) {
            RECEIVED.add(msg);
            latch.countDown();
        }
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);
        long timeoutMs = Long.parseLong(args[4]);
        latch = new CountDownLatch(count);

        SpringApplication app = new SpringApplication(SpringScenario.class);
        app.setWebApplicationType(WebApplicationType.NONE);
        app.setBannerMode(Banner.Mode.OFF);
        Map<String, Object> props = new LinkedHashMap<>();
        props.put("rocketmq.name-server", namesrv);
        props.put("rocketmq.producer.group", group + "_P");
        props.put("scenario.topic", topic);
        props.put("scenario.group", group);
        props.put("spring.main.log-startup-info", "false");
        app.setDefaultProperties(props);

        Map<String, Object> out = new LinkedHashMap<>();
        try (ConfigurableApplicationContext ctx = app.run()) {
            RocketMQTemplate template = ctx.getBean(RocketMQTemplate.class);
            List<Object> sent = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                sent.add(send(template, topic + ":TagS", "spring-" + i, "key-" + i, i));
            }
            sent.add(send(template, topic + ":TagOther", "other", "key-other", count));
            out.put("sent", sent);
            out.put("allReceived", latch.await(timeoutMs, TimeUnit.MILLISECONDS));
            out.put("received", Obs.sorted(new ArrayList<>(RECEIVED)));
        }
        System.out.println("@@RESULT " + new GsonBuilder().serializeNulls().create().toJson(out));
        System.out.flush();
        System.exit(0);
    }

    static Map<String, Object> send(RocketMQTemplate template, String destination, String body,
        String keys, int seq) {
        Message<String> msg = MessageBuilder.withPayload(body)
            .setHeader(RocketMQHeaders.KEYS, keys)
            .setHeader("seq", String.valueOf(seq))
            .build();
        SendResult r = template.syncSend(destination, msg);
        return Obs.send(r);
    }
}
