// What the Java group members of gengroup's interop tests share: the consumer
// settings, the JSON lines they report on stdout, and the run of a member --
// subscribe, report every record consumed until SIGTERM, then close the
// consumer (leaving the group). Compiled along with each member (javac finds
// it on the source path).

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.function.Function;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

final class MemberRun {
    private MemberRun() {}

    static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    // {"event":EVENT,"generation":N,"partitions":[P,...]} for the consumer's generation.
    static void report(KafkaConsumer<String, String> consumer, String event, Collection<Integer> partitions) {
        emit("{\"event\":\"" + event + "\",\"generation\":" + consumer.groupMetadata().generationId()
            + ",\"partitions\":" + partitions + "}");
    }

    // The settings of every member: where, which group, who, and committing
    // what it consumed from the earliest offset on.
    static Properties properties(String bootstrap, String group, String clientId) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("client.id", clientId);
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "true");
        props.put("auto.commit.interval.ms", "300");
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        return props;
    }

    // Subscribes to TOPIC with the listener made for the consumer and reports
    // each record it consumes, until SIGTERM; then closes the consumer.
    static void run(
        Properties props,
        String topic,
        Function<KafkaConsumer<String, String>, ConsumerRebalanceListener> listener
    ) {
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
        try {
            consumer.subscribe(List.of(topic), listener.apply(consumer));
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
