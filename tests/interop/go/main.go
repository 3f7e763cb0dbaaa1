// Command interop-go runs one scenario of the Go client (github.com/apache/rocketmq-client-go/v2)
// against a NameServer and prints what a user of the client sees, for the differential tests in
// tests/interop (test_go_scenarios.py, go_runner.py).
//
//	interop-go SCENARIO '{"namesrv": "127.0.0.1:9876", "topic": "T", ...}'
//
// Each event is a JSON line on stdout; the last is "@@RESULT " and the observation (or an
// "error"). The client's own log goes to stderr.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

const mark = "@@RESULT "

// Args are the scenario's parameters, as the Python runner passes them.
type Args struct {
	Namesrv  string `json:"namesrv"`
	Topic    string `json:"topic"`
	Group    string `json:"group"`
	Mode     string `json:"mode"`
	Count    int    `json:"count"`
	TimeoutS int    `json:"timeout_s"`
}

// deadline is when a scenario stops waiting for a state and reports what it has.
func (a Args) deadline() time.Time {
	return time.Now().Add(time.Duration(a.TimeoutS) * time.Second)
}

var scenarios = map[string]func(Args) (any, error){
	"send":       send,
	"tag_filter": tagFilter,
	"retry_dlq":  retryDlq,
}

func emit(prefix string, value any) {
	line, err := json.Marshal(value)
	if err != nil {
		line, _ = json.Marshal(map[string]string{"error": "unserialisable: " + err.Error()})
	}
	fmt.Println(prefix + string(line))
}

func main() {
	rlog.SetLogLevel("warn")
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: interop-go SCENARIO ARGS_JSON")
		os.Exit(2)
	}
	run, ok := scenarios[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", os.Args[1])
		os.Exit(2)
	}
	args := Args{Count: 4, TimeoutS: 60}
	if err := json.Unmarshal([]byte(os.Args[2]), &args); err != nil {
		fmt.Fprintf(os.Stderr, "bad arguments: %v\n", err)
		os.Exit(2)
	}
	obs, err := run(args)
	if err != nil {
		emit(mark, map[string]string{"error": err.Error()})
		os.Exit(1)
	}
	emit(mark, map[string]any{"obs": obs})
}
