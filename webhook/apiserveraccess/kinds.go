// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package apiserveraccess

import (
	"reflect"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kind is one kind of object the webhook admits and what a mutation may change in it: the data of a kind with data,
// and in a pod spec its host aliases and volumes and the env, args, command and volume mounts of every container and
// init container. The handler answers a patch of anything else allowed without changes (mutable).
type kind struct {
	// name is the kind as an admission request names it.
	name string
	// object is an empty object of the kind.
	object client.Object
	// podSpecPath is the JSON pointer of the object's pod spec, "" for a kind without one.
	podSpecPath string
	// podSpec is the object's pod spec, for a kind with one.
	podSpec func(client.Object) *corev1.PodSpec
	// data is the object's data, for a kind with data.
	data func(client.Object) *map[string]string
}

// kinds are the kinds the webhooks admit.
var kinds = []kind{
	{name: "Pod", object: &corev1.Pod{}, podSpecPath: "/spec", podSpec: func(obj client.Object) *corev1.PodSpec { return &obj.(*corev1.Pod).Spec }},
	{name: "DaemonSet", object: &appsv1.DaemonSet{}, podSpecPath: "/spec/template/spec",
		podSpec: func(obj client.Object) *corev1.PodSpec { return &obj.(*appsv1.DaemonSet).Spec.Template.Spec }},
	{name: "Deployment", object: &appsv1.Deployment{}, podSpecPath: "/spec/template/spec",
		podSpec: func(obj client.Object) *corev1.PodSpec { return &obj.(*appsv1.Deployment).Spec.Template.Spec }},
	{name: "ConfigMap", object: &corev1.ConfigMap{}, data: func(obj client.Object) *map[string]string { return &obj.(*corev1.ConfigMap).Data }},
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

// mutableContainerFields are the fields of a container that a mutation may change.
var mutableContainerFields = []string{"env", "args", "command", "volumeMounts"}

// mutable says whether a JSON patch operation at path changes only what a mutation of the kind may change.
func (k *kind) mutable(path string) bool {
	if k.data != nil {
		return path == "/data" || strings.HasPrefix(path, "/data/")
	}
	rest, ok := strings.CutPrefix(path, k.podSpecPath+"/")
	if !ok {
		return false
	}
	field, rest, _ := strings.Cut(rest, "/")
	switch field {
	case "hostAliases", "volumes":
		return true
	case "containers", "initContainers":
		index, rest, ok := strings.Cut(rest, "/")
		if _, err := strconv.Atoi(index); err != nil || !ok {
			return false
		}
		field, _, _ := strings.Cut(rest, "/")
		return slices.Contains(mutableContainerFields, field)
	}
	return false
}
