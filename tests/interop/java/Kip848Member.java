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

import java.util.Collection;
import java.util.Properties;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.common.TopicPartition;

public class Kip848Member {
    public static void main(String[] args) {
        Properties props = MemberRun.properties(args[0], args[1], "java-kip848-member");
        props.put("group.protocol", "consumer");
        if (!args[3].equals("-"))
            props.put("group.remote.assignor", args[3]);
        TreeSet<Integer> owned = new TreeSet<>();
        MemberRun.run(props, args[2], consumer -> new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                for (TopicPartition tp : partitions)
                    owned.remove(tp.partition());
                MemberRun.report(consumer, "assigned", owned);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                onPartitionsRevoked(partitions);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                for (TopicPartition tp : partitions)
                    owned.add(tp.partition());
                MemberRun.report(consumer, "assigned", owned);
            }
        });
    }
}
