package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// maxConfigFile bounds a --config file: it holds a few flags.
const maxConfigFile = 1 << 20

// serverFlagSet opens the flag parsing of a server command (agent,
// regionserver), whose flags default to their environment variables
// (envOf) and those to a --config file: fs has --config declared, rawEnv
// is the environment alone (where TLS files came from is told from it),
// getenv the environment over the file (never nil). A bad file is an error
// unless help was asked for.
func serverFlagSet(name string, args []string, env func(string) string, envOf map[string]string, stdout, stderr io.Writer) (fs *flag.FlagSet, rawEnv, getenv func(string) string, err error) {
	fs = flag.NewFlagSet(name, flag.ContinueOnError)
	newUsageOut(fs, stdout, stderr)
	fs.String("config", "", "JSON file of flag values, {\"tls-cert\": \"...\", ...}: flags win over environment variables, which win over the file (env BATON_CONFIG)")
	noEnv := func(string) string { return "" }
	rawEnv = env
	if rawEnv == nil {
		rawEnv = noEnv
	}
	getenv, err = withConfigFile(args, env, "BATON_CONFIG", envOf)
	if err != nil && !helpAsked(args) {
		return nil, nil, nil, err
	}
	if getenv == nil {
		getenv = noEnv
	}
	return fs, rawEnv, getenv, nil
}

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
	path, given := configArg(args)
	if !given {
		path = getenv(configEnv)
	}
	if path == "" { // none, or --config= turning BATON_CONFIG off
		return getenv, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.IsDir() {
		return nil, usagef("--config %s is a directory", path)
	}
	// Read through a bound: a FIFO or a device says nothing of its size.
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
	if err != nil {
		return nil, usagef("--config: %v", err)
	}
	if len(raw) > maxConfigFile {
		return nil, usagef("--config %s: more than a configuration holds (%d bytes at most)", path, maxConfigFile)
	}
	doc, err := decodeConfigObject(raw)
	if err != nil {
		return nil, usagef("--config %s: not a JSON object of flag names and values: %v", path, err)
	}
	vals := map[string]string{} // by environment variable
	var problems []string
	keys := make([]string, 0, len(doc))
	for k := range doc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	seen := map[string]string{}
	for _, k := range keys {
		flagName := strings.ReplaceAll(k, "_", "-")
		env, ok := envOf[flagName]
		if !ok {
			problems = append(problems, fmt.Sprintf("unknown key %q (keys are the flags' names)", k))
			continue
		}
		if other, dup := seen[flagName]; dup {
			problems = append(problems, fmt.Sprintf("keys %q and %q both set --%s", other, k, flagName))
			continue
		}
		seen[flagName] = k
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

// decodeConfigObject decodes one JSON object, refusing a key given twice
// and anything after the object.
func decodeConfigObject(raw []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("want an object, found %v", tok)
	}
	doc := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := doc[k]; dup {
			return nil, fmt.Errorf("key %q given twice", k)
		}
		doc[k] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("something follows the object")
	}
	return doc, nil
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
// one dash too; the last one, as the flag package keeps), before the
// flags are parsed: the file supplies the other flags' defaults. given
// says --config was on the command line at all (an empty value turns
// BATON_CONFIG off).
func configArg(args []string) (path string, given bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		for _, name := range []string{"--config", "-config"} {
			if a == name && i+1 < len(args) {
				path, given = args[i+1], true
				i++
			} else if v, ok := strings.CutPrefix(a, name+"="); ok {
				path, given = v, true
			}
		}
	}
	return path, given
}
