// A Java KafkaConsumer group member using the consumer group protocol
// (KIP-848, group.protocol=consumer), for gengroup's interop tests: joins
// GROUP on TOPIC and reports, as JSON lines on stdout, its whole assignment
// after every change and each record it consumed:
//   {"event":"assigned","generation":EPOCH,"partitions":[P,...]}
//   {"event":"record","partition":P,"offset":O,"value":"..."}
// The coordinator assigns (ASSIGNOR, or "-" for the broker's default); the
// rebalance callbacks are incremental under this protocol, so the member
// keeps its own set. It runs until SIGTERM, then closes (leaving the group).
//
// Usage: java -cp ... Kip848Member BOOTSTRAP GROUP TOPIC ASSIGNOR

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public class Kip848Member {
    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("client.id", "java-kip848-member");
        props.put("group.protocol", "consumer");
        if (!args[3].equals("-"))
            props.put("group.remote.assignor", args[3]);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "true");
        props.put("auto.commit.interval.ms", "300");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props);
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            consumer.wakeup();
            try {
                closed.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        TreeSet<Integer> owned = new TreeSet<>();
        try {
            consumer.subscribe(List.of(args[2]), new ConsumerRebalanceListener() {
                void report() {
                    List<Integer> ids = new ArrayList<>(owned);
                    emit("{\"event\":\"assigned\",\"generation\":" + consumer.groupMetadata().generationId()
                        + ",\"partitions\":" + ids + "}");
                }

                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions)
                        owned.remove(tp.partition());
                    report();
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    onPartitionsRevoked(partitions);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    for (TopicPartition tp : partitions)
                        owned.add(tp.partition());
                    report();
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
