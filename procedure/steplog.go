package procedure

import (
	"io"
	"log"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// stepLogger is a step's Context.Logger: the executor's logger with the
// procedure's id and type, made on first use. Most steps never log, and
// making the sub-logger for every step cost a leader opening regions 4%
// of its CPU. It lives inside the Context, so a step that does not log
// allocates nothing for it. The once guards a step that logs from
// goroutines of its own.
type stepLogger struct {
	base     hclog.Logger
	id       uint64
	typeName string
	rollback bool

	once  sync.Once
	built hclog.Logger
	// ownLevel is set once the step set the sub-logger's level: from then
	// on the level checks ask it instead of the base.
	ownLevel atomic.Bool
}

// initLogger sets c.Logger to a logger for e's step (a rollback step's
// if rollback).
func (c *Context) initLogger(base hclog.Logger, e *entry, rollback bool) {
	c.stepLog.base, c.stepLog.id, c.stepLog.typeName, c.stepLog.rollback = base, e.id, e.ti.name, rollback
	c.Logger = &c.stepLog
}

func (l *stepLogger) get() hclog.Logger {
	l.once.Do(l.build)
	return l.built
}

func (l *stepLogger) build() {
	args := []any{"proc_id", l.id, "type", l.typeName}
	if l.rollback {
		args = append(args, "rollback", true)
	}
	l.built = l.base.With(args...)
}

// Log writes through the sub-logger, made only for a line its level lets
// through: a step's Debug under an Info logger costs no sub-logger.
func (l *stepLogger) Log(level hclog.Level, msg string, args ...interface{}) {
	if level < l.GetLevel() {
		return
	}
	l.get().Log(level, msg, args...)
}
func (l *stepLogger) Trace(msg string, args ...interface{}) { l.Log(hclog.Trace, msg, args...) }
func (l *stepLogger) Debug(msg string, args ...interface{}) { l.Log(hclog.Debug, msg, args...) }
func (l *stepLogger) Info(msg string, args ...interface{})  { l.Log(hclog.Info, msg, args...) }
func (l *stepLogger) Warn(msg string, args ...interface{})  { l.Log(hclog.Warn, msg, args...) }
func (l *stepLogger) Error(msg string, args ...interface{}) { l.Log(hclog.Error, msg, args...) }

// levelOf is the logger whose level this one has: the base's, which the
// sub-logger shares until the step sets its own. A step that only checks
// the level need not make the sub-logger.
func (l *stepLogger) levelOf() hclog.Logger {
	if l.ownLevel.Load() {
		return l.get()
	}
	return l.base
}

func (l *stepLogger) IsTrace() bool { return l.levelOf().IsTrace() }
func (l *stepLogger) IsDebug() bool { return l.levelOf().IsDebug() }
func (l *stepLogger) IsInfo() bool  { return l.levelOf().IsInfo() }
func (l *stepLogger) IsWarn() bool  { return l.levelOf().IsWarn() }
func (l *stepLogger) IsError() bool { return l.levelOf().IsError() }

func (l *stepLogger) ImpliedArgs() []interface{}            { return l.get().ImpliedArgs() }
func (l *stepLogger) With(args ...interface{}) hclog.Logger { return l.get().With(args...) }
func (l *stepLogger) Name() string                          { return l.base.Name() }
func (l *stepLogger) Named(name string) hclog.Logger        { return l.get().Named(name) }
func (l *stepLogger) ResetNamed(name string) hclog.Logger   { return l.get().ResetNamed(name) }
func (l *stepLogger) GetLevel() hclog.Level                 { return l.levelOf().GetLevel() }

func (l *stepLogger) SetLevel(level hclog.Level) {
	l.get().SetLevel(level)
	l.ownLevel.Store(true)
}

func (l *stepLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return l.get().StandardLogger(opts)
}

func (l *stepLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return l.get().StandardWriter(opts)
}
