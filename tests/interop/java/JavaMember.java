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

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;

public class JavaMember {
    public static void main(String[] args) {
        Properties props = MemberRun.properties(args[0], args[1], "java-member");
        props.put("partition.assignment.strategy", args[3]);
        props.put("group.protocol", "classic");
        props.put("session.timeout.ms", "6000");
        props.put("heartbeat.interval.ms", "300");
        MemberRun.run(props, args[2], consumer -> new ConsumerRebalanceListener() {
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
                MemberRun.report(consumer, event, ids);
            }
        });
    }
}
