package io.ferrymq.bench;

import io.netty.bootstrap.Bootstrap;
import io.netty.channel.Channel;
import io.netty.channel.ChannelHandlerContext;
import io.netty.channel.ChannelInitializer;
import io.netty.channel.ChannelOption;
import io.netty.channel.SimpleChannelInboundHandler;
import io.netty.channel.nio.NioEventLoopGroup;
import io.netty.channel.socket.SocketChannel;
import io.netty.channel.socket.nio.NioSocketChannel;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.HdrHistogram.Recorder;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.remoting.netty.NettyDecoder;
import org.apache.rocketmq.remoting.netty.NettyEncoder;
import org.apache.rocketmq.remoting.protocol.RemotingCommand;
import org.apache.rocketmq.remoting.protocol.RequestCode;
import org.apache.rocketmq.remoting.protocol.ResponseCode;
import org.apache.rocketmq.remoting.protocol.header.SendMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.SendMessageRequestHeaderV2;

/**
 * --connections producer connections to the first master, each its own TCP connection with one
 * SEND_MESSAGE_V2 in flight (what that many single-threaded producer processes do). The
 * upstream client keeps ONE connection per broker per client instance, and a client instance per
 * connection would cost thousands of threads here, so this drives the upstream remoting codec
 * (NettyEncoder/NettyDecoder, RemotingCommand, SendMessageRequestHeaderV2) over one shared Netty
 * event loop instead.
 */
final class Connections {
  private Connections() {}

  static void run(Args args, Map<String, Object> out) throws Exception {
    String topic = args.str("topic", "VsBench");
    int connections = (int) args.num("connections", 1_000);
    int queues = (int) args.num("queues", 8);
    long count = args.num("count", 200_000);
    long seconds = args.num("seconds", 20);
    byte[] body = args.body();
    String addr;
    DefaultMQProducer admin = VsBench.producer(args, "vsbench_conn_admin");
    try {
      addr = VsBench.masters(
          admin.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl()).get(0);
    } finally {
      admin.shutdown();
    }
    String host = addr.substring(0, addr.lastIndexOf(':'));
    int port = Integer.parseInt(addr.substring(addr.lastIndexOf(':') + 1));
    Map<String, String> props = new HashMap<>();
    props.put(MessageConst.PROPERTY_TAGS, "bench");
    props.put(MessageConst.PROPERTY_WAIT_STORE_MSG_OK, "true");
    String properties = MessageDecoder.messageProperties2String(props);

    AtomicLong issued = new AtomicLong();
    AtomicLong sent = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    AtomicLong measuring = new AtomicLong(0);
    Recorder recorder = new Recorder(3);
    long[] deadline = {Long.MAX_VALUE};
    CountDownLatch finished = new CountDownLatch(connections);
    NioEventLoopGroup group = new NioEventLoopGroup(2);
    try {
      Bootstrap b = new Bootstrap().group(group).channel(NioSocketChannel.class)
          .option(ChannelOption.TCP_NODELAY, true)
          .option(ChannelOption.CONNECT_TIMEOUT_MILLIS, 10_000)
          .handler(new ChannelInitializer<SocketChannel>() {
            @Override
            protected void initChannel(SocketChannel ch) {
              ch.pipeline().addLast(new NettyEncoder(), new NettyDecoder(),
                  new SimpleChannelInboundHandler<RemotingCommand>() {
                    long t0;
                    int n;

                    void next(Channel c) {
                      if (measuring.get() == 1
                          && (issued.incrementAndGet() > count || System.nanoTime() > deadline[0])) {
                        finished.countDown();
                        return;
                      }
                      SendMessageRequestHeader h = new SendMessageRequestHeader();
                      h.setProducerGroup("vsbench_conn");
                      h.setTopic(topic);
                      h.setDefaultTopic("TBW102");
                      h.setDefaultTopicQueueNums(4);
                      h.setQueueId(n++ % queues);
                      h.setSysFlag(0);
                      h.setBornTimestamp(System.currentTimeMillis());
                      h.setFlag(0);
                      h.setProperties(properties);
                      h.setReconsumeTimes(0);
                      h.setUnitMode(false);
                      h.setBatch(false);
                      RemotingCommand req = RemotingCommand.createRequestCommand(
                          RequestCode.SEND_MESSAGE_V2,
                          SendMessageRequestHeaderV2.createSendMessageRequestHeaderV2(h));
                      req.setBody(body);
                      t0 = System.nanoTime();
                      c.writeAndFlush(req);
                    }

                    @Override
                    public void channelActive(ChannelHandlerContext ctx) {
                      ctx.fireChannelActive();
                    }

                    @Override
                    protected void channelRead0(ChannelHandlerContext ctx, RemotingCommand r) {
                      if (r.getCode() == ResponseCode.SUCCESS) {
                        if (measuring.get() == 1) {
                          sent.incrementAndGet();
                          recorder.recordValue((System.nanoTime() - t0) / 1000);
                        }
                      } else {
                        failed.incrementAndGet();
                        out.putIfAbsent("first_error", r.getCode() + " " + r.getRemark());
                      }
                      next(ctx.channel());
                    }

                    @Override
                    public void userEventTriggered(ChannelHandlerContext ctx, Object evt) {
                      if ("go".equals(evt)) {
                        next(ctx.channel());
                      }
                    }

                    @Override
                    public void exceptionCaught(ChannelHandlerContext ctx, Throwable e) {
                      out.putIfAbsent("first_error", String.valueOf(e));
                      ctx.close();
                    }
                  });
            }
          });
      List<Channel> channels = new ArrayList<>(connections);
      for (int i = 0; i < connections; i++) {
        channels.add(b.connect(host, port).sync().channel());
      }
      out.put("connected", channels.size());
      Report.mark("start");
      long start = System.nanoTime();
      deadline[0] = start + TimeUnit.SECONDS.toNanos(seconds);
      measuring.set(1);
      for (Channel c : channels) {
        c.pipeline().fireUserEventTriggered("go");
      }
      finished.await(seconds + 30, TimeUnit.SECONDS);
      double elapsed = (System.nanoTime() - start) / 1e9;
      Report.mark("end");
      for (Channel c : channels) {
        c.close();
      }
      Report.putRate(out, sent.get(), failed.get(), elapsed, recorder);
    } finally {
      group.shutdownGracefully(0, 1, TimeUnit.SECONDS);
    }
  }
}
