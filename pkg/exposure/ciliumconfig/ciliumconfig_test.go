package ciliumconfig

import (
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

func TestEnableL2(t *testing.T) {
	data := map[string]string{"enable-l2-announcements": "false", "k8s-client-qps": "5", "k8s-client-burst": "50", "debug": "true"}
	if !Enable(data, l2()) {
		t.Fatal("no change reported")
	}
	for k, v := range map[string]string{
		"enable-lb-ipam": "true", "enable-l2-announcements": "true", "l2-announcements-lease-duration": "5s",
		"l2-announcements-renew-deadline": "3s", "l2-announcements-retry-period": "500ms",
		"k8s-client-qps": "10", "k8s-client-burst": "50", "debug": "true",
	} {
		if data[k] != v {
			t.Errorf("%s = %q, want %q", k, data[k], v)
		}
	}
	if _, ok := data["enable-bgp-control-plane"]; ok {
		t.Error("L2 switched on BGP")
	}
	if Enable(data, l2()) {
		t.Error("a second pass changed something")
	}
	if err := Check(data, l2()); err != nil {
		t.Error(err)
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
}
