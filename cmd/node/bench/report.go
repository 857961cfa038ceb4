package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"text/tabwriter"

	"github.com/baton-dev/baton/internal/benchstat"
)

// scaleTLSRatiosOf pairs each region count's TLS row with its plaintext
// row.
func scaleTLSRatiosOf(rows []ScaleRow) []ScaleTLSRatio {
	var out []ScaleTLSRatio
	for _, t := range rows {
		if !t.TLS {
			continue
		}
		for _, p := range rows {
			if p.TLS || p.Regions != t.Regions || p.TableRegions != t.TableRegions || p.Round != t.Round {
				continue
			}
			r := ScaleTLSRatio{Regions: t.Regions, Round: t.Round, RegionsPerSecond: ratioOf(p.RegionsPerSecond, t.RegionsPerSecond)}
			r.FailoverSeconds = optRatio(ratioOf, p.FailoverSeconds, t.FailoverSeconds)
			r.CrashRecovery = optRatio(ratioOf, p.CrashRecoverySeconds, t.CrashRecoverySeconds)
			for i := range min(len(p.Commit), len(t.Commit)) {
				r.CommitLevels = append(r.CommitLevels, t.Commit[i].Procedures)
				r.CommitStepsPerS = append(r.CommitStepsPerS, ratioOf(p.Commit[i].StepsPerSec, t.Commit[i].StepsPerSec))
			}
			out = append(out, r)
			break
		}
	}
	return out
}

// scaleShapeRatiosOf compares the shapes of each region count and
// transport: each row's regions/s over the fastest's. Nothing when no
// region count was measured in more than one shape.
func scaleShapeRatiosOf(rows []ScaleRow) []ScaleShapeRatio {
	var out []ScaleShapeRatio
	for _, r := range rows {
		fastest, fastestPerMachine, shapes, baselines := 0.0, 0.0, 0, 0
		for _, q := range rows {
			if q.Regions == r.Regions && q.TLS == r.TLS && q.Round == r.Round {
				fastest, shapes = max(fastest, q.RegionsPerSecond), shapes+1
				if pm := perMachine(q); pm > 0 {
					fastestPerMachine, baselines = max(fastestPerMachine, pm), baselines+1
				}
			}
		}
		if shapes < 2 {
			continue
		}
		sr := ScaleShapeRatio{Regions: r.Regions, TLS: r.TLS, Shape: r.Shape, Round: r.Round, RegionsPerSecond: r.RegionsPerSecond, OfFastest: ratioOf(fastest, r.RegionsPerSecond)}
		if baselines == shapes {
			sr.OfFastestPerMachine = ratioOf(fastestPerMachine, perMachine(r))
		}
		out = append(out, sr)
	}
	return out
}

// scaleShapeSummaryOf takes, for each shape of a region count and
// transport, the medians of its rounds' ratios (--rounds): nothing when
// the shapes ran once. A round the bench stopped in may lack its fastest
// shape, its others compared with a slower one: it is left out whole
// (Rounds says how many are left).
func scaleShapeSummaryOf(ratios []ScaleShapeRatio) []ScaleShapeSummary {
	type group struct {
		regions int
		tls     bool
	}
	type round struct {
		group
		n int
	}
	type key struct {
		group
		shape string
	}
	groupOf := func(sr ScaleShapeRatio) group { return group{sr.Regions, sr.TLS} }
	shapesIn, most := map[round]int{}, map[group]int{}
	for _, sr := range ratios {
		rk := round{groupOf(sr), sr.Round}
		shapesIn[rk]++
		most[rk.group] = max(most[rk.group], shapesIn[rk])
	}
	var order []key
	byShape := map[key][]ScaleShapeRatio{}
	for _, sr := range ratios {
		if g := groupOf(sr); sr.Round == 0 || shapesIn[round{g, sr.Round}] < most[g] {
			continue
		}
		k := key{groupOf(sr), sr.Shape}
		if _, seen := byShape[k]; !seen {
			order = append(order, k)
		}
		byShape[k] = append(byShape[k], sr)
	}
	var out []ScaleShapeSummary
	for _, k := range order {
		rs := byShape[k]
		of := func(f func(ScaleShapeRatio) float64) []float64 {
			v := make([]float64, len(rs))
			for i, sr := range rs {
				v[i] = f(sr)
			}
			return v
		}
		ofFastest := benchstat.Summarize(of(func(sr ScaleShapeRatio) float64 { return sr.OfFastest }))
		ss := ScaleShapeSummary{
			Regions: k.regions, TLS: k.tls, Shape: k.shape, Rounds: len(rs),
			RegionsPerSecond: benchstat.Median(of(func(sr ScaleShapeRatio) float64 { return sr.RegionsPerSecond })),
			OfFastest:        ofFastest.Median,
			OfFastestMin:     ofFastest.Min,
			OfFastestMax:     ofFastest.Max,
		}
		// Rounds without a machine baseline (0) have no such ratio.
		if pm := slices.DeleteFunc(of(func(sr ScaleShapeRatio) float64 { return sr.OfFastestPerMachine }), func(v float64) bool { return v <= 0 }); len(pm) > 0 {
			ss.OfFastestPerMachine = benchstat.Median(pm)
		}
		out = append(out, ss)
	}
	return out
}

// rowOfRound names r's shape and round in a printed line about it, when
// the shapes ran in rounds (--rounds): "" otherwise, as before.
func rowOfRound(r ScaleRow) string {
	if r.Round == 0 {
		return ""
	}
	return fmt.Sprintf(" (%s, round %d)", r.Shape, r.Round)
}

// perMachine is a row's regions per second over its machine baseline's
// thousand ops per second: 0 without a baseline.
func perMachine(r ScaleRow) float64 {
	if r.Machine.CPUOpsPerSecond <= 0 {
		return 0
	}
	return r.RegionsPerSecond / (r.Machine.CPUOpsPerSecond / 1e3)
}

// optRatio is ratio of two figures a phase may have left out (nil).
func optRatio(ratio func(a, b float64) float64, a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	v := ratio(*a, *b)
	return &v
}

// ratioOf is b/a, 0 when either is not positive.
func ratioOf(a, b float64) float64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	return b / a
}

// scaleGrowthOf is the growth of each cost between consecutive rows.
func scaleGrowthOf(rows []ScaleRow) []ScaleGrowth {
	out := []ScaleGrowth{}
	for i := 1; i < len(rows); i++ {
		a, b := rows[i-1], rows[i]
		if a.Regions == b.Regions || a.TableRegions != b.TableRegions {
			continue
		}
		per10 := 1 / math.Log10(float64(b.Regions)/float64(a.Regions))
		ratio := func(x, y float64) float64 {
			if x <= 0 || y <= 0 {
				return 0
			}
			return math.Pow(y/x, per10)
		}
		opt := func(x, y *float64) *float64 { return optRatio(ratio, x, y) }
		out = append(out, ScaleGrowth{
			From: a.Regions, To: b.Regions,
			OpenSeconds:      ratio(a.OpenSeconds, b.OpenSeconds),
			RegionsPerSecond: ratio(a.RegionsPerSecond, b.RegionsPerSecond),
			MasterRSSMBMax:   ratio(a.MasterRSSMBMax, b.MasterRSSMBMax),
			DataMBMax:        ratio(a.DataMBMax, b.DataMBMax),
			FailoverSeconds:  opt(a.FailoverSeconds, b.FailoverSeconds),
			CrashRecovery:    opt(a.CrashRecoverySeconds, b.CrashRecoverySeconds),
			CatchUpSeconds:   opt(a.CatchUpSeconds, b.CatchUpSeconds),
		})
	}
	return out
}

// scaleNotes says how to read the figures.
func scaleNotes(rows []ScaleRow) []string {
	notes := []string{
		"cost growth per 10x: each cost's ratio between consecutive rows, scaled to a tenfold region count; linear is 10x for times and sizes, 1x for regions/s and failover",
		"machine: a fixed unit of master-like work (encode a region record as JSON, hash it) per second on every core, and the median 4 KiB append+fsync, measured before each row's cluster starts; the same machine kind differs by up to 2x from day to day, so compare runs by their figures over this baseline",
		"crash recovery includes the region server's lease expiring (15 s by default) before its regions are reassigned; after detection counts from the moment the leader listed that lease expired",
	}
	for _, r := range rows {
		if r.RaftDBFreeMB == nil {
			continue
		}
		notes = append(notes, fmt.Sprintf("%d regions: raft.db %.1f MB (the wiped master's, at the end) against %.1f MB of live state (the leader's local WAL's live records after the open); %.1f MB of it free pages: bolt reuses the pages log compaction frees but never shrinks the file",
			r.Regions, *r.RaftDBStoppedMB, r.StateMB, *r.RaftDBFreeMB))
	}
	return notes
}

// PrintScale prints doc as tables, for people (BENCHMARKS.md quotes it).
func PrintScale(out io.Writer, doc ScaleDoc) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	secs := func(v *float64) string {
		if v == nil {
			return "skipped"
		}
		return fmt.Sprintf("%.1f", *v)
	}
	fmt.Fprintln(w, "regions\tshape\ttls\topen (s)\tregions/s\tmaster RSS (MB)\tdata/master (MB)\traft.db / snapshots / WAL (MB)\tstate (MB)\tfailover (s)\tRS crash (s)\tcatch-up (s)\t")
	for _, r := range doc.Rows {
		var db, sn, wal float64
		for _, m := range r.Masters {
			db, sn, wal = max(db, m.RaftDBMB), max(sn, m.SnapshotsMB), max(wal, m.WALMB)
		}
		catch := secs(r.CatchUpSeconds)
		if r.CatchUpFromSnapshot != nil && *r.CatchUpFromSnapshot {
			catch += " (snapshot)"
		}
		crash := secs(r.CrashRecoverySeconds)
		if r.CrashRecoverySeconds != nil {
			crash += fmt.Sprintf(" (%d regions", r.CrashedServerRegions)
			if r.CrashDetectedSeconds != nil {
				crash += fmt.Sprintf("; %.1f after detection", *r.CrashRecoverySeconds-*r.CrashDetectedSeconds)
			}
			crash += ")"
		}
		tlsCol := "off"
		if r.TLS {
			tlsCol = "on"
		}
		shape := r.Shape
		if r.Round > 0 {
			shape += fmt.Sprintf(" (round %d)", r.Round)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%.1f\t%.0f\t%.0f–%.0f\t%.1f\t%.1f / %.1f / %.1f\t%.2f\t%s\t%s\t%s\t\n",
			r.Regions, shape, tlsCol, r.OpenSeconds, r.RegionsPerSecond, r.MasterRSSMBMin, r.MasterRSSMBMax, r.DataMBMax, db, sn, wal, r.StateMB,
			secs(r.FailoverSeconds), crash, catch)
	}
	w.Flush()
	for _, g := range doc.Growth {
		x := func(v float64) string { return fmt.Sprintf("%.2fx", v) }
		ox := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return x(*v)
		}
		fmt.Fprintf(out, "cost growth per 10x (%d → %d regions): open time %s, regions/s %s, master RSS %s, data %s, failover %s, RS crash %s, catch-up %s\n",
			g.From, g.To, x(g.OpenSeconds), x(g.RegionsPerSecond), x(g.MasterRSSMBMax), x(g.DataMBMax), ox(g.FailoverSeconds), ox(g.CrashRecovery), ox(g.CatchUpSeconds))
	}
	for _, r := range doc.Rows {
		if len(r.Commit) == 0 {
			continue
		}
		mode := ""
		if r.TLS {
			mode = ", TLS"
		}
		fmt.Fprintf(out, "\ngroup commit at %d regions%s (no-op procedures of %d steps; leader's log writes, each one fsync):\n", r.Regions, mode, benchCommitSteps)
		w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "in flight\tsteps\tfsyncs\tsteps/fsync\tof in flight\tp99 step (ms)\tsteps/s\t")
		for _, cm := range r.Commit {
			if cm.Fsyncs == 0 && cm.LeaderChanges > 0 {
				fmt.Fprintf(w, "%d\tleader changed during each of %d runs\t\t\t\t\t\t\n", cm.Procedures, cm.LeaderChanges)
				continue
			}
			note := ""
			if cm.LeaderChanges > 0 {
				note = fmt.Sprintf(" (leader changed: reruns %d)", cm.LeaderChanges)
			}
			fmt.Fprintf(w, "%d\t%.0f\t%.0f\t%.1f\t%.2f\t%.1f\t%.0f%s\t\n", cm.Procedures, cm.Steps, cm.Fsyncs, cm.StepsPerFsync, cm.OfConcurrency, cm.StepP99Ms, cm.StepsPerSec, note)
		}
		w.Flush()
	}
	for _, r := range doc.Rows {
		if r.Snapshot != nil {
			printSnapshot(out, r)
		}
	}
	for _, r := range doc.Rows {
		for _, lw := range []struct {
			w    *LeaderWork
			what string
		}{{r.OpenLeader, "the open"}, {r.CrashLeader, "the crash recovery, from detection"}} {
			if lw.w != nil {
				printLeaderWork(out, r, lw.what, lw.w)
			}
		}
	}
	for i, sr := range doc.ShapeRatios {
		if i == 0 {
			fmt.Fprintf(out, "\nshapes against the fastest of their region count (regions/s):\n")
		}
		mode := ""
		if sr.TLS {
			mode = ", TLS"
		}
		perMachine := ""
		if sr.OfFastestPerMachine > 0 {
			perMachine = fmt.Sprintf(" (%.2fx by regions per k machine ops, the speed the machine had before each row)", sr.OfFastestPerMachine)
		}
		round := ""
		if sr.Round > 0 {
			round = fmt.Sprintf(" (round %d)", sr.Round)
		}
		fmt.Fprintf(out, "  %d regions%s%s, %s tables x regions: %.0f regions/s, %.2fx of the fastest%s\n", sr.Regions, mode, round, sr.Shape, sr.RegionsPerSecond, sr.OfFastest, perMachine)
	}
	for i, ss := range doc.ShapeSummary {
		if i == 0 {
			fmt.Fprintf(out, "\nshapes over the rounds (medians; each round's fastest is its own):\n")
		}
		mode := ""
		if ss.TLS {
			mode = ", TLS"
		}
		perMachine := ""
		if ss.OfFastestPerMachine > 0 {
			perMachine = fmt.Sprintf(", %.2fx per machine op", ss.OfFastestPerMachine)
		}
		fmt.Fprintf(out, "  %d regions%s, %s tables x regions: %.0f regions/s, %.2fx of the fastest (%.2f to %.2f over %d rounds)%s\n",
			ss.Regions, mode, ss.Shape, ss.RegionsPerSecond, ss.OfFastest, ss.OfFastestMin, ss.OfFastestMax, ss.Rounds, perMachine)
	}
	for _, tr := range doc.TLSRatios {
		round := ""
		if tr.Round > 0 {
			round = fmt.Sprintf(", round %d", tr.Round)
		}
		fmt.Fprintf(out, "\nTLS against plaintext at %d regions%s (TLS over plaintext): regions/s %.2fx", tr.Regions, round, tr.RegionsPerSecond)
		if tr.FailoverSeconds != nil {
			fmt.Fprintf(out, ", failover time %.2fx", *tr.FailoverSeconds)
		}
		if tr.CrashRecovery != nil {
			fmt.Fprintf(out, ", crash recovery time %.2fx", *tr.CrashRecovery)
		}
		for i, lvl := range tr.CommitLevels {
			fmt.Fprintf(out, ", steps/s at %d in flight %.2fx", lvl, tr.CommitStepsPerS[i])
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintln(out)
	for _, r := range doc.Rows {
		m := r.Machine
		mode := ""
		if r.TLS {
			mode = " (TLS)"
		}
		fmt.Fprintf(out, "machine before %d regions%s%s: %.0f k ops/s on %d cores, fsync %.2f ms; open: %.2f regions per k ops\n",
			r.Regions, mode, rowOfRound(r), m.CPUOpsPerSecond/1e3, m.CPUs, m.FsyncMs, perMachine(r))
	}
	for _, r := range doc.Rows {
		if r.Failed != "" {
			fmt.Fprintf(out, "failed: %d regions%s: %s (the figures before it stand)\n", r.Regions, rowOfRound(r), r.Failed)
		}
	}
	for _, n := range doc.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
}

// printSnapshot prints a row's snapshot phase.
func printSnapshot(out io.Writer, r ScaleRow) {
	s := r.Snapshot
	mode := ""
	if r.TLS {
		mode = ", TLS"
	}
	fmt.Fprintf(out, "\nsnapshot save at %d regions%s (%d no-op procedures in flight; memory: the leader's peak during the save over its peak in %v without one):\n",
		r.Regions, mode, s.LoadProcedures, snapshotQuietWindow)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "save (s)\tfile (MB)\tregions\tleader heap in use (MB)\tlive heap (MB; GCs)\tleader RSS (MB)\tsteps/s without → during\tleader CPU (cores)\tsave's own CPU (s)\tinspect (s)\t")
	note := ""
	if s.LeaderChanges > 0 {
		note = fmt.Sprintf(" (leader changed: reruns %d)", s.LeaderChanges)
	}
	fmt.Fprintf(w, "%.2f\t%.1f\t%d\t%.0f → %.0f (%+.1f)\t%.0f → %.0f (%+.1f; %d)\t%.0f → %.0f (%+.1f)\t%.0f → %.0f (%.2fx)\t%.2f → %.2f\t%.2f\t%.2f%s\t\n",
		s.SaveSeconds, s.FileMB, s.Regions, s.HeapMBBefore, s.HeapMBPeak, s.HeapGrowthMB, s.LiveHeapMBBefore, s.LiveHeapMBPeak, s.LiveHeapGrowthMB, s.SaveGCs, s.RSSMBBefore, s.RSSMBPeak, s.RSSGrowthMB,
		s.StepsPerSecBefore, s.StepsPerSecDuring, s.StepsRatio, s.LeaderCPUBefore, s.LeaderCPUDuring, s.SaveCLICPUSeconds, s.InspectSeconds, note)
	w.Flush()
}

// printLeaderWork prints how the leader spent a phase against the
// machine, and where its CPU went if profiled.
func printLeaderWork(out io.Writer, r ScaleRow, what string, w *LeaderWork) {
	fmt.Fprintf(out, "\nthe leader during %s at %d regions (%s)%s, %.1f s:\n", what, r.Regions, r.Shape, rowOfRound(r), w.Seconds)
	fmt.Fprintf(out, "  CPU %.2f cores, %.0f%% of the machine's %d; every process of the cluster %.2f cores, the machine %.0f%% busy with anything\n",
		w.CPUCores, 100*w.OfMachineCPU, r.Machine.CPUs, w.ClusterCPUCores, 100*w.MachineBusy)
	if w.ClusterCPUMsPerRegion > 0 {
		fmt.Fprintf(out, "  the cluster's CPU per region %.3f ms: the machine's %d cores would do %.0f regions/s at that cost\n",
			w.ClusterCPUMsPerRegion, r.Machine.CPUs, w.MachineRegionsPerSecond)
	}
	fmt.Fprintf(out, "  of the cluster's CPU: the followers %.2f cores, the region servers %.2f; %.0f region server calls, %.1f operations each\n",
		w.FollowersCPUCores, w.RegionServersCPUCores, w.RegionServerCalls, w.OpsPerCall)
	fmt.Fprintf(out, "  log writes %.0f/s, %.0f%% of the %.0f fsyncs/s the disk allows one writer; the writer busy %.0f%% of the time\n",
		w.LogWritesPerSecond, 100*w.OfMachineFsyncs, w.MachineFsyncsPerSecond, 100*w.LogWriteBusy)
	fmt.Fprintf(out, "  per region: %.0f bytes of procedure and state writes (the local WAL's; its cleanup also copied %.0f bytes of older records), %.3f log entries; %.1f regions per log write\n",
		w.BytesPerRegion, w.RewrittenBytesPerRegion, w.EntriesPerRegion, w.RegionsPerLogWrite)
	if len(w.Profile) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	// Cores are averaged over the profile's window (--profile-seconds),
	// which may outlast the phase: the shares are what compares.
	fmt.Fprintln(tw, "  where its CPU went (profile)\tshare\tcores over the profile\t")
	for _, p := range w.Profile {
		fmt.Fprintf(tw, "  %s\t%.1f%%\t%.2f\t\n", p.Part, 100*p.Share, p.Cores)
	}
	tw.Flush()
	fmt.Fprintf(out, "  of all of it, allocating: %.1f%%\n", 100*w.Allocation)
}
