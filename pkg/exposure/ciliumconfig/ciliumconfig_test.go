// SPDX-FileCopyrightText: SAP SE or an SAP affiliate company and Gardener contributors
//
// SPDX-License-Identifier: Apache-2.0

package ciliumconfig

import (
	"maps"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gardener/gardener-extension-cilium-selfhosted/pkg/apis/exposure"
)

func l2() *exposure.ExposureConfig {
	return &exposure.ExposureConfig{Announcement: exposure.AnnouncementL2, L2: &exposure.L2{
		LeaseDuration:      &metav1.Duration{Duration: 5 * time.Second},
		LeaseRenewDeadline: &metav1.Duration{Duration: 3 * time.Second},
		LeaseRetryPeriod:   &metav1.Duration{Duration: 500 * time.Millisecond},
	}}
}

func TestCompleteWritesTimingsAndSwitchesNothing(t *testing.T) {
	timings := LeaseTimings(l2())
	for name, tc := range map[string]struct {
		data, want map[string]string
	}{
		// networking-cilium's chart renders its own defaults (15s/5s/2s) with the announcer.
		"announcer on": {
			data: map[string]string{"enable-l2-announcements": "true", "l2-announcements-lease-duration": "15s", "k8s-client-qps": "5", "k8s-client-burst": "50", "debug": "true"},
			want: map[string]string{"enable-l2-announcements": "true", "l2-announcements-lease-duration": "5s",
				"l2-announcements-renew-deadline": "3s", "l2-announcements-retry-period": "500ms",
				"k8s-client-qps": "10", "k8s-client-burst": "50", "debug": "true"},
		},
		"announcer off": {
			data: map[string]string{"enable-l2-announcements": "false"},
			want: map[string]string{"enable-l2-announcements": "false"},
		},
		"announcer unset": {data: map[string]string{}, want: map[string]string{}},
	} {
		t.Run(name, func(t *testing.T) {
			Complete(tc.data, timings)
			if !maps.Equal(tc.data, tc.want) {
				t.Errorf("completed to %v, want %v", tc.data, tc.want)
			}
			again := maps.Clone(tc.data)
			Complete(again, timings)
			if !maps.Equal(again, tc.data) {
				t.Errorf("a second pass changed %v to %v", tc.data, again)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	bgp := &exposure.ExposureConfig{Announcement: exposure.AnnouncementBGP}
	if err := Check(map[string]string{"enable-bgp-control-plane": "true"}, bgp); err != nil {
		t.Errorf("LB-IPAM is on by default: %v", err)
	}
	err := Check(map[string]string{"enable-lb-ipam": "false"}, bgp)
	if err == nil || !strings.Contains(err.Error(), `enable-bgp-control-plane=""`) || !strings.Contains(err.Error(), `enable-lb-ipam="false"`) ||
		!strings.Contains(err.Error(), "kube-system/cilium-config") {
		t.Errorf("error %v", err)
	}
	if err := Check(map[string]string{}, l2()); err == nil || !strings.Contains(err.Error(), "enable-l2-announcements") {
		t.Errorf("error %v", err)
	}
	if err := Check(map[string]string{"enable-l2-announcements": "true"}, l2()); err != nil {
		t.Error(err)
	}
}
