package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// maxConfigFile bounds a --config file: it holds a few flags.
const maxConfigFile = 1 << 20

// withConfigFile returns getenv extended by the --config file named in
// args (or by the environment variable configEnv): a JSON object whose
// keys are the command's flag names ("tls-cert", or "tls_cert") and whose
// values are the flags' values (strings, numbers, booleans). A flag given
// on the command line wins over its environment variable, which wins over
// the file: the file's value becomes the flag's default, by standing in
// for the variable where it is unset. envOf maps each flag to its
// variable. An unknown key, or a value that is an object or a list, is a
// usage error naming it.
func withConfigFile(args []string, getenv func(string) string, configEnv string, envOf map[string]string) (func(string) string, error) {
	path := configArg(args)
	if path == "" {
		path = getenv(configEnv)
	}
	if path == "" {
		return getenv, nil
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	if info.Size() > maxConfigFile {
		return nil, usagef("--config %s: %d bytes, more than a configuration holds (%d at most)", path, info.Size(), maxConfigFile)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	var doc map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		return nil, usagef("--config %s: not a JSON object of flag names and values: %v", path, err)
	}
	vals := map[string]string{} // by environment variable
	var problems []string
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		flagName := strings.ReplaceAll(k, "_", "-")
		env, ok := envOf[flagName]
		if !ok {
			problems = append(problems, fmt.Sprintf("unknown key %q (keys are the flags' names)", k))
			continue
		}
		v, err := configValue(doc[k])
		if err != nil {
			problems = append(problems, fmt.Sprintf("%q: %v", k, err))
			continue
		}
		vals[env] = v
	}
	if len(problems) > 0 {
		return nil, usagef("--config %s: %s", path, strings.Join(problems, "; "))
	}
	return func(k string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return vals[k]
	}, nil
}

// configValue is a JSON scalar as a flag's value.
func configValue(raw json.RawMessage) (string, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("want a string, a number or a boolean")
}

// configArg finds --config's value in args ("--config F", "--config=F",
// one dash too), before the flags are parsed: the file supplies the other
// flags' defaults.
func configArg(args []string) string {
	for i, a := range args {
		if a == "--" {
			break
		}
		for _, name := range []string{"--config", "-config"} {
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v
			}
		}
	}
	return ""
}
