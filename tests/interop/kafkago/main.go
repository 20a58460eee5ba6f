// Command kafkago-member joins a consumer group with segmentio/kafka-go and
// reports what it does as JSON lines on stdout, for gengroup's interop tests.
//
// Usage: kafkago-member BOOTSTRAP GROUP TOPIC
//
// Events: {"event":"assigned","generation":N,"member":ID,"leader":B,
// "partitions":{TOPIC:[P...]}} for each generation (leader: this member
// assigned it), {"event":"record","generation":N,"topic":T,
// "partition":P,"offset":O,"value":V} per record consumed, and
// {"event":"error","error":E} for a failure. It runs until SIGTERM or
// SIGINT, then leaves the group and exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

var out = struct {
	sync.Mutex
	enc *json.Encoder
}{enc: json.NewEncoder(os.Stdout)}

func emit(event map[string]any) {
	out.Lock()
	defer out.Unlock()
	_ = out.enc.Encode(event)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: kafkago-member BOOTSTRAP GROUP TOPIC")
		os.Exit(2)
	}
	bootstrap, groupID, topic := os.Args[1], os.Args[2], os.Args[3]
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// kafka-go says only in its log that this member leads the generation
	// being formed.
	var leading bool
	var leadingLock sync.Mutex
	logger := kafka.LoggerFunc(func(msg string, args ...any) {
		line := fmt.Sprintf(msg, args...)
		fmt.Fprintln(os.Stderr, line)
		if strings.HasPrefix(line, "selected as leader") {
			leadingLock.Lock()
			leading = true
			leadingLock.Unlock()
		}
	})
	group, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                groupID,
		Brokers:           []string{bootstrap},
		Topics:            []string{topic},
		HeartbeatInterval: 300 * time.Millisecond,
		SessionTimeout:    6 * time.Second,
		RebalanceTimeout:  10 * time.Second,
		JoinGroupBackoff:  200 * time.Millisecond,
		StartOffset:       kafka.FirstOffset,
		Logger:            logger,
		ErrorLogger:       logger,
	})
	if err != nil {
		emit(map[string]any{"event": "error", "error": err.Error()})
		os.Exit(1)
	}
	defer group.Close()

	for {
		gen, err := group.Next(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
				return
			}
			emit(map[string]any{"event": "error", "error": err.Error()})
			continue
		}
		leadingLock.Lock()
		led := leading
		leading = false
		leadingLock.Unlock()
		partitions := map[string][]int{}
		for t, assigned := range gen.Assignments {
			partitions[t] = []int{}
			for _, a := range assigned {
				partitions[t] = append(partitions[t], a.ID)
			}
		}
		emit(map[string]any{
			"event": "assigned", "generation": gen.ID, "member": gen.MemberID,
			"leader": led, "partitions": partitions,
		})
		for t, assigned := range gen.Assignments {
			for _, a := range assigned {
				consume(gen, bootstrap, t, a)
			}
		}
	}
}

// consume reads one partition for the generation, committing as it goes.
func consume(gen *kafka.Generation, bootstrap, topic string, a kafka.PartitionAssignment) {
	gen.Start(func(ctx context.Context) {
		reader := kafka.NewReader(kafka.ReaderConfig{
			Brokers:   []string{bootstrap},
			Topic:     topic,
			Partition: a.ID,
			MinBytes:  1,
			MaxBytes:  1 << 20,
			MaxWait:   200 * time.Millisecond,
		})
		defer reader.Close()
		if err := reader.SetOffset(a.Offset); err != nil {
			emit(map[string]any{"event": "error", "error": err.Error()})
			return
		}
		for {
			msg, err := reader.ReadMessage(ctx)
			if err != nil {
				if ctx.Err() == nil {
					emit(map[string]any{"event": "error", "error": err.Error()})
				}
				return
			}
			emit(map[string]any{
				"event": "record", "generation": gen.ID, "topic": msg.Topic,
				"partition": msg.Partition, "offset": msg.Offset, "value": string(msg.Value),
			})
			err = gen.CommitOffsets(map[string]map[int]int64{topic: {msg.Partition: msg.Offset + 1}})
			if err != nil && ctx.Err() == nil {
				emit(map[string]any{"event": "error", "error": "commit: " + err.Error()})
			}
		}
	})
}
