// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"context"
	"fmt"
	"reflect"

	"gomodules.xyz/jsonpatch/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/diff"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gardencorev1beta1 "github.com/gardener/gardener/pkg/apis/core/v1beta1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/cilium"
)

// kind is all the webhook knows of one kind of object it admits; the handler (decoding, patch) and the mutator
// (selection, mutation) both work from it.
//
// What a mutation may change is fixed here: the data of a kind with data, and in a pod spec its host aliases and
// volumes and the env, args, command and volume mounts of every container and init container. The patch covers exactly
// these, and patchOf refuses any other difference between the original and the mutated object.
type kind struct {
	// name is the kind as an admission request names it.
	name string
	// object is an empty object of the kind; the mutator finds the kind of an object by its Go type.
	object client.Object
	// fromProjection builds the object from its decoded projection.
	fromProjection func(*projectedObject) client.Object
	// podSpecPath is the JSON pointer of the object's pod spec, "" for a kind without one.
	podSpecPath string
	// podSpec is the object's pod spec, for a kind with one.
	podSpec func(client.Object) *corev1.PodSpec
	// data is the object's data, for a kind with data.
	data func(client.Object) *map[string]string
	// selects tells from the object alone, before anything is read, whether the mutation applies to it; old is nil on
	// CREATE.
	selects func(obj, old client.Object) bool
	// mutate changes the object for the self-hosted shoot.
	mutate func(ctx context.Context, m *mutator, k *kind, obj client.Object, shoot *gardencorev1beta1.Shoot) error
}

var kinds = []kind{
	{
		name:   "Pod",
		object: &corev1.Pod{},
		fromProjection: func(p *projectedObject) client.Object {
			return &corev1.Pod{ObjectMeta: p.Metadata.objectMeta(), Spec: p.Spec.podSpec()}
		},
		podSpecPath: "/spec",
		podSpec:     func(obj client.Object) *corev1.PodSpec { return &obj.(*corev1.Pod).Spec },
		// Only at creation: a pod's environment is immutable afterwards.
		selects: func(obj, old client.Object) bool { return old == nil && cilium.IsWorkload(obj.GetLabels()) },
		mutate: func(ctx context.Context, m *mutator, _ *kind, obj client.Object, _ *gardencorev1beta1.Shoot) error {
			return m.pinPod(ctx, obj.(*corev1.Pod))
		},
	},
	workload("DaemonSet", &appsv1.DaemonSet{}, func(obj client.Object) *corev1.PodTemplateSpec { return &obj.(*appsv1.DaemonSet).Spec.Template }),
	workload("Deployment", &appsv1.Deployment{}, func(obj client.Object) *corev1.PodTemplateSpec { return &obj.(*appsv1.Deployment).Spec.Template }),
	{
		name:   "ConfigMap",
		object: &corev1.ConfigMap{},
		fromProjection: func(p *projectedObject) client.Object {
			return &corev1.ConfigMap{ObjectMeta: p.Metadata.objectMeta(), Data: p.Data}
		},
		data: func(obj client.Object) *map[string]string { return &obj.(*corev1.ConfigMap).Data },
		// Cilium's chart gives `cilium-config` no labels: the match condition picks it (MatchConditions), and so does this.
		selects: func(obj, _ client.Object) bool { return obj.GetName() == cilium.ConfigMapName },
		mutate: func(ctx context.Context, m *mutator, _ *kind, obj client.Object, shoot *gardencorev1beta1.Shoot) error {
			m.mutateCiliumConfig(ctx, obj.(*corev1.ConfigMap), shoot)
			return nil
		},
	},
}

// workload is the kind of a Cilium workload, whose pod template the mutation pins.
func workload(name string, object client.Object, template func(client.Object) *corev1.PodTemplateSpec) kind {
	return kind{
		name:   name,
		object: object,
		fromProjection: func(p *projectedObject) client.Object {
			obj := object.DeepCopyObject().(client.Object)
			p.Metadata.setOn(obj)
			*template(obj) = p.Spec.Template.podTemplate()
			return obj
		},
		podSpecPath: "/spec/template/spec",
		podSpec:     func(obj client.Object) *corev1.PodSpec { return &template(obj).Spec },
		selects:     func(obj, _ client.Object) bool { return cilium.IsWorkload(obj.GetLabels()) },
		mutate: func(ctx context.Context, m *mutator, k *kind, obj client.Object, _ *gardencorev1beta1.Shoot) error {
			return m.pinTemplate(ctx, k.podSpec(obj))
		},
	}
}

// kindNamed is the kind an admission request names, nil for one the webhook does not admit.
func kindNamed(name string) *kind {
	for i := range kinds {
		if kinds[i].name == name {
			return &kinds[i]
		}
	}
	return nil
}

// kindOf is the kind of obj, nil for one the webhook does not admit.
func kindOf(obj client.Object) *kind {
	for i := range kinds {
		if reflect.TypeOf(kinds[i].object) == reflect.TypeOf(obj) {
			return &kinds[i]
		}
	}
	return nil
}

// patchOf is the JSON patch from original to mutated. It refuses a mutation that changed anything the kind does not
// let it change: such a change would not reach the object, and the webhook would silently not do what it says.
func (k *kind) patchOf(original, mutated client.Object) ([]jsonpatch.JsonPatchOperation, error) {
	// The mutable fields are taken out of both objects for the comparison and put back: copying whole objects for it
	// cost more than the rest of the patch.
	originalMutable, mutatedMutable := k.takeMutable(original), k.takeMutable(mutated)
	var err error
	// reflect.DeepEqual rather than equality.Semantic: strict, and without the allocations of the latter, which were a
	// tenth of an admission's.
	if !reflect.DeepEqual(original, mutated) {
		err = fmt.Errorf("the mutation of %s %s changed fields it may not change: %s", k.name, original.GetName(), diff.Diff(original, mutated))
	}
	k.restoreMutable(original, originalMutable)
	k.restoreMutable(mutated, mutatedMutable)
	if err != nil {
		return nil, err
	}
	var ops []jsonpatch.JsonPatchOperation
	if k.data != nil {
		ops = append(ops, dataPatch(*k.data(original), *k.data(mutated))...)
	}
	if k.podSpec != nil {
		ops = append(ops, podSpecPatch(k.podSpecPath, k.podSpec(original), k.podSpec(mutated))...)
	}
	return ops, nil
}

// mutableFields are the fields of an object that a mutation may change.
type mutableFields struct {
	data        map[string]string
	hostAliases []corev1.HostAlias
	volumes     []corev1.Volume
	containers  []containerFields
}

// containerFields are the fields of a container that a mutation may change.
type containerFields struct {
	env          []corev1.EnvVar
	args         []string
	command      []string
	volumeMounts []corev1.VolumeMount
}

// takeMutable takes the mutable fields out of obj, leaving them empty.
func (k *kind) takeMutable(obj client.Object) mutableFields {
	var m mutableFields
	if k.data != nil {
		m.data, *k.data(obj) = *k.data(obj), nil
	}
	if k.podSpec != nil {
		spec := k.podSpec(obj)
		m.hostAliases, m.volumes, spec.HostAliases, spec.Volumes = spec.HostAliases, spec.Volumes, nil, nil
		for _, containers := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range containers {
				c := &containers[i]
				m.containers = append(m.containers, containerFields{c.Env, c.Args, c.Command, c.VolumeMounts})
				c.Env, c.Args, c.Command, c.VolumeMounts = nil, nil, nil, nil
			}
		}
	}
	return m
}

// restoreMutable puts back what takeMutable took out of obj.
func (k *kind) restoreMutable(obj client.Object, m mutableFields) {
	if k.data != nil {
		*k.data(obj) = m.data
	}
	if k.podSpec != nil {
		spec := k.podSpec(obj)
		spec.HostAliases, spec.Volumes = m.hostAliases, m.volumes
		n := 0
		for _, containers := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
			for i := range containers {
				c, f := &containers[i], m.containers[n]
				c.Env, c.Args, c.Command, c.VolumeMounts = f.env, f.args, f.command, f.volumeMounts
				n++
			}
		}
	}
}
