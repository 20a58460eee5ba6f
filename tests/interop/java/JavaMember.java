// A Java KafkaConsumer group member for gengroup's interop tests: joins GROUP
// on TOPIC with the assignor named by STRATEGY (its class name) and reports,
// as JSON lines on stdout, each assignment (all the partitions it owns after
// the rebalance: with a cooperative assignor the callback is given only the
// added ones), each revocation and each record it consumed:
//   {"event":"assigned","generation":N,"partitions":[P,...]}
//   {"event":"revoked","generation":N,"partitions":[P,...]}
//   {"event":"record","partition":P,"offset":O,"value":"..."}
// It runs until SIGTERM, then closes the consumer (leaving the group).
//
// Usage: java -cp ... JavaMember BOOTSTRAP GROUP TOPIC STRATEGY

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class JavaMember {
    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("client.id", "java-member");
        props.put("partition.assignment.strategy", args[3]);
        props.put("group.protocol", "classic");
        props.put("session.timeout.ms", "6000");
        props.put("heartbeat.interval.ms", "300");
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "true");
        props.put("auto.commit.interval.ms", "300");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
        CountDownLatch closed = new CountDownLatch(1);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            consumer.wakeup();
            try {
                closed.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        try {
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    if (!partitions.isEmpty())
                        report("revoked", partitions);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    report("assigned", consumer.assignment());
                }

                private void report(String event, Collection<TopicPartition> partitions) {
                    List<Integer> ids = new ArrayList<>();
                    for (TopicPartition tp : partitions)
                        ids.add(tp.partition());
                    ids.sort(null);
                    emit("{\"event\":\"" + event + "\",\"generation\":" + consumer.groupMetadata().generationId()
                        + ",\"partitions\":" + ids + "}");
                }
            });
            while (true) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(100)))
                    emit("{\"event\":\"record\",\"partition\":" + r.partition() + ",\"offset\":" + r.offset()
                        + ",\"value\":\"" + r.value() + "\"}");
            }
        } catch (WakeupException e) {
            // closing
        } finally {
            consumer.close();
            closed.countDown();
        }
    }
}
