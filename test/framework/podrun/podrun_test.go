// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package podrun

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestEmptyDirLivesAsLongAsItsPod: as kubelet keeps a pod's emptyDir across its container's restarts and gives a new
// pod a new one, what a container wrote into its emptyDir is there when it starts again in the same pod, and not in
// the next pod's; a ConfigMap volume holds what the ConfigMap holds, for every pod.
func TestEmptyDirLivesAsLongAsItsPod(t *testing.T) {
	dir := t.TempDir()
	containerOf := func(uid types.UID) (Container, corev1.Container) {
		container := corev1.Container{Name: "agent", VolumeMounts: []corev1.VolumeMount{
			{Name: "tmp", MountPath: "/tmp"},
			{Name: "config", MountPath: "/tmp/config"},
		}}
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{container}, Volumes: []corev1.Volume{
			{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "cilium-config"},
			}}},
		}}}
		pod.UID = uid
		return Container{Pod: pod, Name: "agent", Dir: dir, ConfigMaps: map[string]map[string]string{"cilium-config": {"debug": "false"}}}, container
	}
	volumesOf := func(uid types.UID) map[string]string {
		t.Helper()
		_, volumes, err := mountScript(containerOf(uid))
		if err != nil {
			t.Fatal(err)
		}
		return volumes
	}
	first := volumesOf("pod-1")
	if err := os.WriteFile(filepath.Join(first["/tmp"], "written"), []byte("by the first container"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		uid         types.UID
		wantWritten bool
	}{
		{"the container again, in the same pod", "pod-1", true},
		{"a new pod", "pod-2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			volumes := volumesOf(tc.uid)
			_, err := os.Stat(filepath.Join(volumes["/tmp"], "written"))
			if written := err == nil; written != tc.wantWritten {
				t.Errorf("the file the first container wrote into its emptyDir is there: %t, want %t", written, tc.wantWritten)
			}
			if b, err := os.ReadFile(filepath.Join(volumes["/tmp/config"], "debug")); err != nil || string(b) != "false" {
				t.Errorf("the ConfigMap volume holds debug=%q (%v), want false", b, err)
			}
		})
	}
}
