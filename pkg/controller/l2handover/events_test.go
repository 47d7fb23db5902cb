// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package l2handover

import (
	"context"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"

	extensionsv1alpha1 "github.com/gardener/gardener/pkg/apis/extensions/v1alpha1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/scheme"
)

// TestHandoversAreEventsOfTheirOwn pins what the handover's events rely on in client-go's events API, which
// controller-runtime's GetEventRecorder uses: events of the same regarding and related objects, type, reason, action
// and reporter fold into one series that keeps the first one's note (tools/events event_broadcaster.go getKey,
// recordToSink). Each handover names the lease as written, whose resourceVersion is new, so each is an event of its
// own with its note; the same lease again only counts the series up.
func TestHandoversAreEventsOfTheirOwn(t *testing.T) {
	clientset := kubefake.NewClientset()
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clientset.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.New(), Name)
	exp := &extensionsv1alpha1.SelfHostedShootExposure{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-apiserver", UID: "exposure", ResourceVersion: "7"}}
	lease := func(resourceVersion string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "cilium-l2announce-kube-system-x", UID: "lease", ResourceVersion: resourceVersion}}
	}
	recorder.Eventf(exp, lease("10"), corev1.EventTypeNormal, EventHandedOver, "HandOver", "from cp-0 to cp-1")
	recorder.Eventf(exp, lease("11"), corev1.EventTypeNormal, EventHandedOver, "HandOver", "from cp-1 to cp-0")
	// The control: the lease of the second handover again folds into its event, counted as a series.
	recorder.Eventf(exp, lease("11"), corev1.EventTypeNormal, EventHandedOver, "HandOver", "from cp-2 to cp-0")

	var list *eventsv1.EventList
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		list, err = clientset.EventsV1().Events("kube-system").List(ctx, metav1.ListOptions{})
		return err == nil && slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool { return e.Series != nil && e.Series.Count == 2 }), err
	}); err != nil {
		t.Fatalf("no event counted as a series of two: %v (%+v)", err, list)
	}
	// Recorded in goroutines of their own, the two of the same lease in either order: the series keeps the note of
	// whichever came first.
	var notes []string
	for _, e := range list.Items {
		notes = append(notes, e.Note)
	}
	if len(list.Items) != 2 || !slices.Contains(notes, "from cp-0 to cp-1") {
		t.Errorf("events with notes %q, want two: the first handover's and one of the same lease counted twice", notes)
	}
}
