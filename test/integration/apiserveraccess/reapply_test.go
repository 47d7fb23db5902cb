package apiserveraccess_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apiserverendpoints"
)

// reapply writes desired over the stored object of its name the way Gardener's resource manager does: it merges the
// desired object of the ManagedResource into the current one, which for these objects is the desired spec and data,
// and updates it (pkg/resourcemanager/controller/managedresource merger.go). It returns the object as stored.
func reapply(ctx context.Context, desired client.Object) (client.Object, error) {
	current := desired.DeepCopyObject().(client.Object)
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(desired), current); err != nil {
		return nil, err
	}
	obj := desired.DeepCopyObject().(client.Object)
	obj.SetResourceVersion(current.GetResourceVersion())
	return obj, env.Client.Update(ctx, obj)
}

func pinned(d *appsv1.DaemonSet) bool {
	return slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == apiserverendpoints.VolumeName })
}

// TestResourceManagerReapplyKeepsCiliumPinned: with the webhook unreachable, re-applying Cilium's chart as the
// resource manager does is refused by the chart's admission policies for every object the webhook had pinned, and the
// stored objects stay pinned; with the webhook back, the same re-apply is admitted pinned and changes nothing (same
// generation, same resourceVersion), so no agent rolls.
func TestResourceManagerReapplyKeepsCiliumPinned(t *testing.T) {
	ctx := context.Background()
	rendered := installChart(t)
	agent := storedAgent(t)
	if !pinned(agent) {
		t.Fatal("the stored agent DaemonSet is not pinned to begin with")
	}
	desired := []client.Object{rendered.Agent, rendered.Operator, rendered.Config}

	env.StopExtension(ctx, false)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = env.StartExtensionAgain()
		}
	})
	for _, obj := range desired {
		_, err := reapply(ctx, obj)
		if err == nil || !strings.Contains(err.Error(), "gardener-extension-cilium-selfhosted") || !strings.Contains(err.Error(), "retry once it does") {
			t.Errorf("re-applying %T %s while the webhook is down: %v, want a refusal by the chart's admission policy", obj, obj.GetName(), err)
		}
	}
	stored := &appsv1.DaemonSet{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(agent), stored); err != nil {
		t.Fatal(err)
	}
	if !pinned(stored) || stored.Generation != agent.Generation {
		t.Errorf("the agent DaemonSet changed while the webhook was down: pinned %v, generation %d -> %d", pinned(stored), agent.Generation, stored.Generation)
	}

	if err := env.StartExtensionAgain(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	waitUntilMutating(t, rendered.Agent)
	for _, obj := range desired {
		before := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), before); err != nil {
			t.Fatal(err)
		}
		after, err := reapply(ctx, obj)
		if err != nil {
			t.Errorf("re-applying %T %s with the webhook back: %v", obj, obj.GetName(), err)
			continue
		}
		if after.GetResourceVersion() != before.GetResourceVersion() || after.GetGeneration() != before.GetGeneration() {
			t.Errorf("re-applying %T %s with the webhook back changed it: resourceVersion %s -> %s, generation %d -> %d",
				obj, obj.GetName(), before.GetResourceVersion(), after.GetResourceVersion(), before.GetGeneration(), after.GetGeneration())
		}
	}
}
