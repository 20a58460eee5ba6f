// One member of the rebalance benchmark (benchmarks/bench_rebalance.py), on the
// Java KafkaConsumer. Arguments: bootstrap topic group client-id protocol, where
// protocol is "eager" (RangeAssignor), "cooperative" (CooperativeStickyAssignor)
// or "consumer" (group.protocol=consumer, the coordinator's default assignor).
//
// It prints to stdout, one event a line, times in seconds since the epoch:
//   S <time>                                   subscribing
//   A <time> <p,p,...>                         the assignment changed (partitions owned now)
//   R <time> <partition> <first> <last> <ts>   records first..last consumed (ts: the
//                                              first record's timestamp in ms)
// Every record's value is read (its length summed), as a real handler must.

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class RebalanceMember {
    static double now() {
        Instant t = Instant.now();
        return t.getEpochSecond() + t.getNano() / 1e9;
    }

    public static void main(String[] args) {
        String bootstrap = args[0], topic = args[1], group = args[2], clientId = args[3];
        String protocol = args[4];
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "true");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        if (protocol.equals("consumer")) {
            props.put("group.protocol", "consumer");
        } else {
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "10000");
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
            props.put(
                ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                protocol.equals("cooperative")
                    ? "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"
                    : "org.apache.kafka.clients.consumer.RangeAssignor");
        }
        StringBuilder out = new StringBuilder();
        long total = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            System.out.printf("S %.6f%n", now());
            System.out.flush();
            consumer.subscribe(List.of(topic));
            // SIGTERM: wake the poll and close the consumer (it leaves the group).
            Thread main = Thread.currentThread();
            Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                consumer.wakeup();
                try {
                    main.join(15000);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }));
            Set<Integer> owned = new TreeSet<>();
            try {
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(50));
                double t = now();
                for (TopicPartition tp : records.partitions()) {
                    List<ConsumerRecord<byte[], byte[]>> part = records.records(tp);
                    for (ConsumerRecord<byte[], byte[]> r : part) {
                        total += r.value() == null ? 0 : r.value().length;
                    }
                    out.append(String.format("R %.6f %d %d %d %d%n", t, tp.partition(),
                        part.get(0).offset(), part.get(part.size() - 1).offset(),
                        part.get(0).timestamp()));
                }
                Set<Integer> now = new TreeSet<>();
                for (TopicPartition tp : consumer.assignment()) {
                    now.add(tp.partition());
                }
                if (!now.equals(owned)) {
                    owned = now;
                    List<String> ps = new ArrayList<>();
                    for (int p : owned) {
                        ps.add(Integer.toString(p));
                    }
                    out.append(String.format("A %.6f %s%n", t, String.join(",", ps)));
                }
                if (out.length() > 0) {
                    System.out.print(out);
                    System.out.flush();
                    out.setLength(0);
                }
            }
            } catch (WakeupException e) {
                // shutting down
            }
        }
    }
}
