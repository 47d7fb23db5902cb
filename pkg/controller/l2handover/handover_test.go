// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package l2handover

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/addressing"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/ciliumconfig"
	exposurehealth "github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/health"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/exposure/resources"
	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
	"github.com/gardener/gardener-extension-cilium-selfhosted/test/framework/fixtures"
)

var fastLease = Timings{Duration: 5 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}

func TestDecide(t *testing.T) {
	down := exposurehealth.State{Ready: false, Reason: "connection refused"}
	failed := Facts{Self: "cp-1", Holder: "cp-0", Unrenewed: 1300 * time.Millisecond, Timings: fastLease, HolderProbed: true, HolderAPIServer: down,
		SelfSelected: true, SelfReady: true, AgentReadyFor: time.Minute}
	released := func(f *Facts) { f.Holder, f.Unrenewed = "", 200*time.Millisecond }
	for name, tc := range map[string]struct {
		change func(*Facts)
		want   bool
		why    string
	}{
		"holder failed, this node ready":  {func(*Facts) {}, true, "the kube-apiserver of the holder cp-0 is not ready (connection refused) and the lease was not renewed for 1.3s"},
		"no holder for two retry periods": {func(f *Facts) { f.Holder = "" }, false, "the lease has had no holder for 1.3s"},
		"just released, agent settled":    {released, true, "the lease was released 200ms ago and Cilium's agent on cp-1 has been ready for 1m0s"},
		"just released, agent fresh": {func(f *Facts) { released(f); f.AgentReadyFor = 3 * time.Second }, false,
			"agent on cp-1 has been ready for only 3s: its L2 responder may not answer yet"},
		"just released, not selected": {func(f *Facts) { released(f); f.SelfSelected = false }, false, "does not select cp-1"},
		"just released, agent outdated": {func(f *Facts) { released(f); f.AgentOutdated = true }, false,
			"runs an older pod template than others: the rollout under way will restart it"},
		"this node holds it":            {func(f *Facts) { f.Holder = "cp-1" }, false, "this node holds the lease"},
		"holder no endpoint":            {func(f *Facts) { f.HolderProbed = false }, false, "the holder cp-0 is no endpoint"},
		"holder's kube-apiserver ready": {func(f *Facts) { f.HolderAPIServer = exposurehealth.State{Ready: true} }, false, "is ready: its agent can renew"},
		"renewed within two retries":    {func(f *Facts) { f.Unrenewed = 1200 * time.Millisecond }, false, "renewed 1.2s ago, within 1.25s"},
		"not selected":                  {func(f *Facts) { f.SelfSelected = false }, false, "does not select cp-1"},
		"node not ready":                {func(f *Facts) { f.SelfReady = false }, false, "node cp-1 is not Ready"},
		"agent not ready":               {func(f *Facts) { f.AgentReadyFor = 0 }, false, "agent on cp-1 is not ready"},
	} {
		t.Run(name, func(t *testing.T) {
			f := failed
			tc.change(&f)
			got, why := Decide(f)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("Decide = %v, %q; want %v, containing %q", got, why, tc.want, tc.why)
			}
		})
	}
}

func TestTimings(t *testing.T) {
	if got := fastLease.UnrenewedAfter(); got != 1250*time.Millisecond {
		t.Errorf("UnrenewedAfter = %s, want 2 retry periods and 250ms", got)
	}
	// client-go's acquire retries within (1 + JitterFactor 1.2) retry periods.
	if got := fastLease.AcknowledgeWithin(); got != 2100*time.Millisecond {
		t.Errorf("AcknowledgeWithin = %s, want 2.2 retry periods and 1s", got)
	}
	for d, want := range map[time.Duration]int32{5 * time.Second: 5, 15 * time.Second: 15, time.Minute: 15, 500 * time.Millisecond: 1, 4500 * time.Millisecond: 5} {
		if got := releasedLeaseSeconds(Timings{Duration: d}); got != want {
			t.Errorf("a released lease taken for %d s with a lease duration of %s, want %d", got, d, want)
		}
	}
	got, err := TimingsOf(map[string]string{ciliumconfig.KeyL2LeaseRetryPeriod: "500ms"})
	if err != nil || got != (Timings{Duration: 15 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: 500 * time.Millisecond}) {
		t.Errorf("TimingsOf = %+v, %v; want Cilium's defaults but the retry period", got, err)
	}
	if _, err := TimingsOf(map[string]string{ciliumconfig.KeyL2LeaseDuration: "five"}); err == nil || !strings.Contains(err.Error(), ciliumconfig.KeyL2LeaseDuration) {
		t.Errorf("TimingsOf a bad duration: %v, want an error naming the key", err)
	}
}

// fakeProbes are the probes' verdicts by address.
type fakeProbes struct {
	states  map[string]exposurehealth.State
	tracked map[types.NamespacedName][]string
}

func (p *fakeProbes) Track(key types.NamespacedName, addresses []string) { p.tracked[key] = addresses }
func (p *fakeProbes) Untrack(key types.NamespacedName)                   { delete(p.tracked, key) }
func (p *fakeProbes) Stop()                                              {}
func (p *fakeProbes) State(address string) exposurehealth.State {
	if s, ok := p.states[address]; ok {
		return s
	}
	return exposurehealth.State{Ready: true}
}

type world struct {
	h      *Handover
	c      client.Client
	clock  *clocktesting.FakePassiveClock
	probes *fakeProbes
	events *events.FakeRecorder
	lease  types.NamespacedName
	// logs are the handover's log lines.
	logs *[]string
}

// newWorld is the exposure's objects as the exposure applied them, cp-0 holding the lease, the agents ready on every
// control-plane node, and a handover on cp-1.
func newWorld(t *testing.T, extra ...client.Object) *world {
	t.Helper()
	exp := fixtures.Exposure("bare-metal", fixtures.Nodes())
	exp.Spec.Type = "cilium"
	built, err := resources.Build(resources.Input{
		Name: exp.Name, Namespace: exp.Namespace, Port: 443, Endpoints: exp.Spec.Endpoints, Families: []addressing.Family{addressing.IPv4},
		Config: &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2, Pool: exposure.Pool{CIDRs: []string{"203.0.113.0/28"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	objs := []client.Object{exp, built.L2Policy,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: cilium.ConfigMapName}, Data: map[string]string{
			ciliumconfig.KeyL2LeaseDuration: "5s", ciliumconfig.KeyL2LeaseRenewDeadline: "3s", ciliumconfig.KeyL2LeaseRetryPeriod: "500ms",
		}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: LeaseKey(exp).Name}, Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To("cp-0"), LeaseDurationSeconds: ptr.To[int32](5), LeaseTransitions: ptr.To[int32](3),
		}},
	}
	for _, s := range built.EndpointSlices {
		objs = append(objs, s)
	}
	for _, n := range fixtures.Nodes() {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		objs = append(objs, n)
		objs = append(objs, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: cilium.Namespace, Name: "cilium-" + n.Name, Labels: map[string]string{cilium.LabelKeyApp: cilium.LabelValueAgent}},
			Spec:       corev1.PodSpec{NodeName: n.Name},
			Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		})
	}
	c := fake.NewClientBuilder().WithScheme(scheme.New()).WithObjects(append(objs, extra...)...).Build()
	w := &world{
		c: c, clock: clocktesting.NewFakePassiveClock(time.Now()),
		probes: &fakeProbes{states: map[string]exposurehealth.State{}, tracked: map[types.NamespacedName][]string{}},
		events: events.NewFakeRecorder(10), lease: LeaseKey(exp),
	}
	w.logs = &[]string{}
	log := funcr.New(func(prefix, args string) { *w.logs = append(*w.logs, args) }, funcr.Options{})
	w.h = &Handover{Node: "cp-1", Type: "cilium", Cache: c, Client: c, Reader: c, Probes: w.probes, Recorder: w.events, Clock: w.clock, Log: log}
	return w
}

// after steps the handover through d in ticks.
func (w *world) after(d time.Duration, each func()) {
	for end := w.clock.Now().Add(d); w.clock.Now().Before(end); {
		w.clock.SetTime(w.clock.Now().Add(tick))
		if each != nil {
			each()
		}
		w.h.step(context.Background())
	}
}

func (w *world) get(t *testing.T) *coordinationv1.Lease {
	t.Helper()
	l := &coordinationv1.Lease{}
	if err := w.c.Get(context.Background(), w.lease, l); err != nil {
		t.Fatal(err)
	}
	return l
}

// renew is an agent's renewal of the lease as holder.
func (w *world) renew(t *testing.T, holder string) {
	t.Helper()
	l := w.get(t)
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.RenewTime = &metav1.MicroTime{Time: w.clock.Now()}
	if err := w.c.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

func (w *world) holder(t *testing.T) string { return ptr.Deref(w.get(t).Spec.HolderIdentity, "") }

func (w *world) event(t *testing.T) string {
	t.Helper()
	select {
	case e := <-w.events.Events:
		return e
	default:
		return ""
	}
}

func TestHandsOverWhenTheHolderFailed(t *testing.T) {
	w := newWorld(t)
	w.h.step(context.Background())
	if got := w.probes.tracked[w.lease]; len(got) != 1 || got[0] != "10.0.1.10:443" {
		t.Fatalf("probing %v, want cp-0's endpoint 10.0.1.10:443", got)
	}
	w.probes.states["10.0.1.10:443"] = exposurehealth.State{Reason: "dial tcp 10.0.1.10:443: i/o timeout"}
	before := testutil.ToFloat64(handoversTotal.WithLabelValues(resultHandedOver))
	w.after(fastLease.UnrenewedAfter()-tick, nil)
	if h := w.holder(t); h != "cp-0" {
		t.Fatalf("handed over to %s before the lease went unrenewed for %s", h, fastLease.UnrenewedAfter())
	}
	w.after(2*tick, nil)
	l := w.get(t)
	if ptr.Deref(l.Spec.HolderIdentity, "") != "cp-1" || ptr.Deref(l.Spec.LeaseTransitions, 0) != 4 || l.Spec.RenewTime == nil || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 5 {
		t.Fatalf("lease %+v, want cp-1 holding it, the fourth transition, renewed now, its duration kept", l.Spec)
	}
	if e := w.event(t); !strings.Contains(e, EventHandedOver) || !strings.Contains(e, "from cp-0 to cp-1") || !strings.Contains(e, "i/o timeout") {
		t.Errorf("event %q, want %s from cp-0 to cp-1 with the probe's failure", e, EventHandedOver)
	}
	if got := testutil.ToFloat64(handoversTotal.WithLabelValues(resultHandedOver)) - before; got != 1 {
		t.Errorf("%v handovers counted, want 1", got)
	}
	acknowledged := testutil.ToFloat64(handoversTotal.WithLabelValues(resultAcknowledged))
	w.after(fastLease.RetryPeriod, nil)
	w.renew(t, "cp-1")
	w.after(tick, nil)
	if got := testutil.ToFloat64(handoversTotal.WithLabelValues(resultAcknowledged)) - acknowledged; got != 1 {
		t.Errorf("%v acknowledgements counted, want 1", got)
	}
	w.after(5*time.Second, func() { w.renew(t, "cp-1") })
	if h := w.holder(t); h != "cp-1" || w.event(t) != "" {
		t.Errorf("after the acknowledgement the lease is %s's, want cp-1's and no more events", h)
	}
}

func TestNoHandover(t *testing.T) {
	for name, tc := range map[string]struct {
		probe   exposurehealth.State
		renewed bool
		change  func(w *world)
		// logged are the reasons logged once each, in order: an operator sees why a failed holder kept its lease.
		logged []string
	}{
		// A blind holder is one whose kube-apiserver is down; one that stopped renewing with its kube-apiserver up
		// (its agent restarting) keeps the lease, as a restarted agent retakes it.
		"holder's kube-apiserver ready": {probe: exposurehealth.State{Ready: true}},
		"holder still renews":           {probe: exposurehealth.State{Reason: "refused"}, renewed: true, logged: []string{`"reason"="refused"`}},
		"this node not selected": {probe: exposurehealth.State{Reason: "refused"}, logged: []string{`"reason"="refused"`, "does not select cp-1"}, change: func(w *world) {
			n := &corev1.Node{}
			_ = w.c.Get(context.Background(), client.ObjectKey{Name: "cp-1"}, n)
			delete(n.Labels, "node-role.kubernetes.io/control-plane")
			_ = w.c.Update(context.Background(), n)
		}},
		"this node's agent not ready": {probe: exposurehealth.State{Reason: "refused"}, logged: []string{`"reason"="refused"`, "agent on cp-1 is not ready"}, change: func(w *world) {
			p := &corev1.Pod{}
			_ = w.c.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-cp-1"}, p)
			p.Status.Conditions[0].Status = corev1.ConditionFalse
			if err := w.c.Status().Update(context.Background(), p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			if tc.change != nil {
				tc.change(w)
			}
			w.probes.states["10.0.1.10:443"] = tc.probe
			w.after(2*fastLease.Duration, func() {
				if tc.renewed {
					w.renew(t, "cp-0")
				}
			})
			if h := w.holder(t); h != "cp-0" {
				t.Errorf("the lease went to %s", h)
			}
			if e := w.event(t); e != "" {
				t.Errorf("event %q", e)
			}
			if len(*w.logs) != len(tc.logged) {
				t.Fatalf("logged %d lines (the first: %q), want one for each of %q", len(*w.logs), (*w.logs)[:min(3, len(*w.logs))], tc.logged)
			}
			for i, want := range tc.logged {
				if !strings.Contains((*w.logs)[i], want) {
					t.Errorf("logged %q, want %q", (*w.logs)[i], want)
				}
			}
		})
	}
}

func TestHandoverUndoneWithoutRenewal(t *testing.T) {
	w := newWorld(t)
	w.probes.states["10.0.1.10:443"] = exposurehealth.State{Reason: "refused"}
	w.after(fastLease.UnrenewedAfter()+tick, nil)
	if h := w.holder(t); h != "cp-1" {
		t.Fatalf("holder %s, want cp-1", h)
	}
	_ = w.event(t)
	w.after(fastLease.AcknowledgeWithin()-tick, nil)
	if h := w.holder(t); h != "cp-1" {
		t.Fatalf("undone before %s: holder %q", fastLease.AcknowledgeWithin(), h)
	}
	w.after(2*tick, nil)
	l := w.get(t)
	if ptr.Deref(l.Spec.HolderIdentity, "x") != "" || ptr.Deref(l.Spec.LeaseDurationSeconds, 0) != 1 {
		t.Errorf("lease %+v, want it cleared for every agent as client-go's release clears it", l.Spec)
	}
	if e := w.event(t); !strings.Contains(e, EventHandoverUndone) || !strings.Contains(e, "cp-1 did not renew") {
		t.Errorf("event %q, want %s", e, EventHandoverUndone)
	}
}

// release empties the lease's holder as client-go's release on a graceful stop does.
func (w *world) release(t *testing.T) {
	t.Helper()
	l := w.get(t)
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
	l.Spec.RenewTime = &metav1.MicroTime{Time: w.clock.Now()}
	if err := w.c.Update(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

// agentReadySince sets the Ready condition of the agent pod on cp-1 as kubelet does when the agent starts.
func (w *world) agentReadySince(t *testing.T, since time.Time) {
	t.Helper()
	p := &corev1.Pod{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-cp-1"}, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(since)
	if err := w.c.Status().Update(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// TestTakesAReleasedLease: a lease its holder released (an agent stopping in a rollout) goes to this node at once when
// its agent has settled, so that an agent that has just started, whose L2 responder does not answer yet, does not take
// it; not when this node's agent is fresh itself, nor once the agents had their tries.
func TestTakesAReleasedLease(t *testing.T) {
	for name, tc := range map[string]struct {
		readyFor time.Duration
		// generations of the agent pods' template on cp-0 and cp-1, as the DaemonSet controller labels them
		generations [2]string
		want        string
	}{
		"agent settled":                       {time.Minute, [2]string{"3", "3"}, "cp-1"},
		"agent fresh":                         {AgentSettledAfter - 3*time.Second, [2]string{"3", "3"}, ""},
		"agent settled, but yet to be rolled": {time.Minute, [2]string{"4", "3"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t)
			for i, node := range []string{"cp-0", "cp-1"} {
				p := &corev1.Pod{}
				if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: cilium.Namespace, Name: "cilium-" + node}, p); err != nil {
					t.Fatal(err)
				}
				p.Labels["pod-template-generation"] = tc.generations[i]
				if err := w.c.Update(context.Background(), p); err != nil {
					t.Fatal(err)
				}
			}
			w.agentReadySince(t, w.clock.Now().Add(-tc.readyFor))
			w.h.step(context.Background())
			w.release(t)
			// This node's agent renews what it holds; after this, the agents have had their tries.
			w.after(2*fastLease.UnrenewedAfter(), func() {
				if w.holder(t) == "cp-1" {
					w.renew(t, "cp-1")
				}
			})
			if h := w.holder(t); h != tc.want {
				t.Fatalf("holder %q, want %q", h, tc.want)
			}
			if e := w.event(t); (e != "") != (tc.want != "") || (e != "" && !strings.Contains(e, "from nobody (released) to cp-1")) {
				t.Errorf("event %q", e)
			}
			if d := ptr.Deref(w.get(t).Spec.LeaseDurationSeconds, 0); tc.want != "" && d != 5 {
				t.Errorf("the lease taken for %d s, want the agents' 5 s: the release's 1 s would let every agent take it first", d)
			}
		})
	}
}

// TestNoReleasedLeaseRightAfterAnUndo: a handover this replica undid empties the lease; it does not take it again for
// its node within a lease duration, which would hand it back and forth to an agent that does not renew.
func TestNoReleasedLeaseRightAfterAnUndo(t *testing.T) {
	w := newWorld(t)
	w.probes.states["10.0.1.10:443"] = exposurehealth.State{Reason: "refused"}
	w.after(fastLease.UnrenewedAfter()+fastLease.AcknowledgeWithin()+2*tick, nil)
	if e1, e2 := w.event(t), w.event(t); !strings.Contains(e2, EventHandoverUndone) {
		t.Fatalf("events %q, %q; want a handover undone", e1, e2)
	}
	w.after(fastLease.Duration-tick, nil)
	if h := w.holder(t); h != "" {
		t.Errorf("holder %q after the undo, want the lease left to the agents", h)
	}
}

// conflictOnce renews the lease as cp-0 right before the handover's write, as a holder that comes back does.
type conflictOnce struct {
	client.Client
	w    *world
	t    *testing.T
	done bool
}

func (c *conflictOnce) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if !c.done {
		c.done = true
		c.w.renew(c.t, "cp-0")
	}
	return c.Client.Update(ctx, obj, opts...)
}

func TestHandoverLosesToARenewal(t *testing.T) {
	w := newWorld(t)
	w.h.Client = &conflictOnce{Client: w.c, w: w, t: t}
	w.probes.states["10.0.1.10:443"] = exposurehealth.State{Reason: "refused"}
	conflicts := testutil.ToFloat64(handoversTotal.WithLabelValues(resultConflict))
	w.after(fastLease.UnrenewedAfter()+tick, nil)
	if h := w.holder(t); h != "cp-0" {
		t.Errorf("holder %s, want cp-0, which renewed between the read and the write", h)
	}
	if got := testutil.ToFloat64(handoversTotal.WithLabelValues(resultConflict)) - conflicts; got != 1 {
		t.Errorf("%v conflicts counted, want 1", got)
	}
}
