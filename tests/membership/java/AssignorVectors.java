// Runs one of the Java client's sticky assignors on cases read from stdin and
// prints its output, for gengroup's StickyBalancer and CooperativeStickyBalancer
// tests (compiled and run by them against the kafka-clients jar the Kafka test
// harness caches). The only argument names the assignor: "sticky" or
// "cooperative-sticky".
//
// Input, one case after another:
//   case
//   topic NAME PARTITIONS
//   member MEMBER_ID TOPICS OWNED USER_DATA GENERATION
//   end
// TOPICS is a comma-separated list or "-" for none; OWNED the subscription's
// owned partitions as TOPIC:P,P;TOPIC:P (in that order) or "-"; USER_DATA hex
// or "-" for null; GENERATION the subscription's (version 2+) generation id,
// negative for none. Members are put into a HashMap in the order given, as the
// Java client's leader does with the JoinGroup response's members.
//   userdata GENERATION OWNED
// prints the user data a member sends after being assigned the OWNED
// partitions ("-" for none) in that generation (a negative GENERATION: before
// any assignment).
//
// Output: "case", then "assign MEMBER_ID TOPIC:P,P;TOPIC:P" per member ("-"
// for nothing) or "failed EXCEPTION" if the assignor threw, then "end"; or
// "userdata HEX".

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import java.util.TreeSet;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupAssignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public class AssignorVectors {
    public static void main(String[] args) throws Exception {
        String name = args[0];
        newAssignor(name);  // an unknown name fails before any input is read
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        StringBuilder out = new StringBuilder();
        Node node = new Node(0, "localhost", 9092);
        List<PartitionInfo> partitions = new ArrayList<>();
        Map<String, Subscription> subscriptions = new HashMap<>();
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split(" ");
            switch (f[0]) {
                case "case":
                    partitions = new ArrayList<>();
                    subscriptions = new HashMap<>();
                    break;
                case "topic":
                    for (int p = 0; p < Integer.parseInt(f[2]); p++)
                        partitions.add(new PartitionInfo(f[1], p, node, new Node[] {node}, new Node[] {node}));
                    break;
                case "member":
                    List<String> topics = f[2].equals("-") ? List.of() : Arrays.asList(f[2].split(","));
                    ByteBuffer userData = f[4].equals("-") ? null : ByteBuffer.wrap(unhex(f[4]));
                    subscriptions.put(f[1], new Subscription(
                        topics, userData, parse(f[3]), Integer.parseInt(f[5]), Optional.empty()));
                    break;
                case "end":
                    Cluster cluster = new Cluster("c", List.of(node), partitions, new HashSet<>(), new HashSet<>());
                    out.append("case\n");
                    GroupAssignment result;
                    try {
                        result = newAssignor(name).assign(cluster, new GroupSubscription(subscriptions));
                    } catch (RuntimeException e) {
                        out.append("failed ").append(e.getClass().getSimpleName()).append("\nend\n");
                        break;
                    }
                    for (Map.Entry<String, Assignment> e : new TreeMap<>(result.groupAssignment()).entrySet())
                        out.append("assign ").append(e.getKey()).append(' ')
                            .append(format(e.getValue().partitions())).append('\n');
                    out.append("end\n");
                    break;
                case "userdata":
                    ConsumerPartitionAssignor assignor = newAssignor(name);
                    int generation = Integer.parseInt(f[1]);
                    if (generation >= 0)
                        assignor.onAssignment(new Assignment(parse(f[2])),
                            new ConsumerGroupMetadata("g", generation, "m", Optional.empty()));
                    out.append("userdata ").append(hex(assignor.subscriptionUserData(new HashSet<>()))).append('\n');
                    break;
                default:
                    throw new IllegalArgumentException("bad line: " + line);
            }
        }
        System.out.print(out);
    }

    static ConsumerPartitionAssignor newAssignor(String name) {
        switch (name) {
            case "sticky":
                return new StickyAssignor();
            case "cooperative-sticky":
                return new CooperativeStickyAssignor();
            default:
                throw new IllegalArgumentException("unknown assignor: " + name);
        }
    }

    static List<TopicPartition> parse(String spec) {
        List<TopicPartition> owned = new ArrayList<>();
        if (!spec.equals("-")) {
            for (String group : spec.split(";")) {
                String[] tp = group.split(":");
                for (String p : tp[1].split(","))
                    owned.add(new TopicPartition(tp[0], Integer.parseInt(p)));
            }
        }
        return owned;
    }

    static String format(List<TopicPartition> partitions) {
        Map<String, TreeSet<Integer>> byTopic = new TreeMap<>();
        for (TopicPartition tp : partitions)
            byTopic.computeIfAbsent(tp.topic(), t -> new TreeSet<>()).add(tp.partition());
        if (byTopic.isEmpty())
            return "-";
        List<String> groups = new ArrayList<>();
        for (Map.Entry<String, TreeSet<Integer>> e : byTopic.entrySet()) {
            List<String> ps = new ArrayList<>();
            for (int p : e.getValue())
                ps.add(Integer.toString(p));
            groups.add(e.getKey() + ":" + String.join(",", ps));
        }
        return String.join(";", groups);
    }

    static byte[] unhex(String s) {
        byte[] b = new byte[s.length() / 2];
        for (int i = 0; i < b.length; i++)
            b[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return b;
    }

    static String hex(ByteBuffer buffer) {
        if (buffer == null)
            return "-";
        StringBuilder sb = new StringBuilder();
        ByteBuffer b = buffer.duplicate();
        while (b.hasRemaining())
            sb.append(String.format("%02x", b.get() & 0xff));
        return sb.toString();
    }
}
