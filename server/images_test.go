package server

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"mime/multipart"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"ferry/catalog"
	"ferry/dtype"
	"ferry/imageproc"
	"ferry/pipeline/wan"
	"ferry/server/queue"
	"ferry/synth"
)

// imageModels is a folder of three wan-tiny models: "t2v" (text to
// video), "i2v" (Wan 2.1 I2V: a CLIP tower, 36 input channels) and
// "flf2v" (I2V with FLF2V's position embedding over two images). i2v
// holds t2v's text encoder and VAE (copies): the text encoder is shared,
// the VAE is not (i2v's holder must encode images, t2v's only decodes).
func imageModels(t *testing.T) string {
	t.Helper()
	dir := synthFolder(t, "wan-tiny", "t2v")
	for i, name := range []string{"i2v", "flf2v"} {
		w := catalog.WanTinyI2V()
		w.Name = name
		if name == "flf2v" {
			pos := 2 * w.ImageEncoder.Tokens()
			w.Transformer.PosEmbedSeqLen = &pos
		}
		a, err := synth.Wan(w)
		if err != nil {
			t.Fatal(err)
		}
		if err := synth.Write(filepath.Join(dir, name), a, synth.Options{Seed: uint64(10 + i), DType: dtype.BF16}); err != nil {
			t.Fatal(err)
		}
	}
	for _, comp := range []string{wan.TextEncoder, wan.VAE} {
		dst := filepath.Join(dir, "i2v", comp)
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		copyDir(t, filepath.Join(dir, "t2v", comp), dst)
	}
	return dir
}

// testPNG is a w×h PNG whose pixels depend on seed.
func testPNG(t *testing.T, w, h, seed int) []byte {
	t.Helper()
	img := image.NewNRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.SetNRGBA(x, y, color.NRGBA{uint8(x*255/w + seed), uint8(y*255/h + 3*seed), uint8((x*y + seed) % 256), 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestImageToVideoJobs: image-to-video models take their first frame as
// input_reference and an FLF2V one its last as last_image (a data URL or
// plain base64); each video is the pipeline's on that folder with those
// images, bit for bit, a text-to-video job after them still decodes with
// its own VAE, and images a model cannot take, or lacks, are a 400 naming
// the field.
func TestImageToVideoJobs(t *testing.T) {
	dir := imageModels(t)
	tap := newVideoTap()
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, faults: &faults{onVideo: tap.put}})
	first, last := testPNG(t, 45, 37, 0), testPNG(t, 30, 50, 90)
	dataURL := "data:image/png;base64," + base64.StdEncoding.EncodeToString(first)
	plain := base64.StdEncoding.EncodeToString(last)
	body := func(model, extra string) string {
		b := strings.Replace(tiny(`"plan":"resident"`), "wan-tiny", model, 1)
		if extra != "" {
			b = strings.TrimSuffix(b, "}") + "," + extra + "}"
		}
		return b
	}
	decode := func(data []byte) *imageproc.RGB {
		img, err := imageproc.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}

	var snap residencyView
	if code, _, data := h.do("GET", "/v1/residency", ""); code != 200 || json.Unmarshal(data, &snap) != nil {
		t.Fatalf("residency: %d %s", code, data)
	}
	for _, sh := range snap.Shared {
		if sh.Component == wan.VAE {
			t.Errorf("the VAE is shared by %v: a text-to-video holder cannot encode i2v's images", sh.Models)
		}
	}
	if len(snap.Shared) != 1 || !slices.Equal(snap.Shared[0].Models, []string{"i2v", "t2v"}) {
		t.Errorf("shared components %+v: want i2v and t2v sharing their text encoder", snap.Shared)
	}

	for _, c := range []struct {
		model, extra string
		edit         func(p *wan.Pipeline, r *wan.Request)
	}{
		{"i2v", `"input_reference":"` + dataURL + `"`, func(_ *wan.Pipeline, r *wan.Request) { r.Image = decode(first) }},
		{"flf2v", `"input_reference":"` + dataURL + `","last_image":"` + plain + `"`,
			func(_ *wan.Pipeline, r *wan.Request) { r.Image, r.LastImage = decode(first), decode(last) }},
		{"t2v", "", func(*wan.Pipeline, *wan.Request) {}},
	} {
		v := h.wait(h.submit(body(c.model, c.extra)), 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("%s: %s %+v", c.model, v.Status, v.Error)
		}
		ref := referenceVideoOf(t, filepath.Join(dir, c.model), 1, c.edit)
		if !slices.Equal(tap.get(t, v.ID), ref) {
			t.Errorf("%s: the served video differs from the pipeline's with the same images", c.model)
		}
		if c.extra != "" {
			if got, err := h.s.q.GetInput(t.Context(), v.ID, inputImage); err != nil || !bytes.Equal(got, first) {
				t.Errorf("%s: the stored first image: %d bytes, %v", c.model, len(got), err)
			}
		}
	}

	// Loading warms an image-to-video model with grey frames (two for
	// FLF2V) as it warms a text-to-video one with a one-frame request.
	h.do("POST", "/v1/models/flf2v/unload", "")
	if code, _, data := h.do("POST", "/v1/models/flf2v/load", ""); code != 200 || !h.resident("flf2v") {
		t.Errorf("load flf2v: %d %s, resident %v", code, data, h.resident("flf2v"))
	}

	for _, c := range []struct {
		name, body, param string
	}{
		{"no image", body("i2v", ""), "input_reference"},
		{"image on text to video", body("t2v", `"input_reference":"`+dataURL+`"`), "input_reference"},
		{"last frame on i2v", body("i2v", `"input_reference":"`+dataURL+`","last_image":"`+plain+`"`), "last_image"},
		{"flf2v without its last frame", body("flf2v", `"input_reference":"`+dataURL+`"`), "last_image"},
		{"one frame", body("flf2v", `"input_reference":"`+dataURL+`","last_image":"`+plain+`","num_frames":1`), "num_frames"},
		{"not base64", body("i2v", `"input_reference":"data:image/png;base64,@@@"`), "input_reference"},
		{"a URL", body("i2v", `"input_reference":"https://example.com/a.png"`), "input_reference"},
		{"not an image", body("i2v", `"input_reference":"`+base64.StdEncoding.EncodeToString([]byte("GIF89a..."))+`"`), "input_reference"},
		{"huge header", body("i2v", `"input_reference":"`+base64.StdEncoding.EncodeToString(pngClaiming(t, 60000, 60000))+`"`), "input_reference"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, data := h.do("POST", "/v1/videos", c.body)
			var e apiError
			json.Unmarshal(data, &e)
			if code != 400 || e.Error.Param == nil || *e.Error.Param != c.param {
				t.Errorf("%d %s; want 400 naming %s", code, data, c.param)
			}
		})
	}
}

// TestImagesSurviveRestart: a queued image-to-video job runs after a
// restart from the image stored with it.
func TestImagesSurviveRestart(t *testing.T) {
	dir := imageModels(t)
	data := t.TempDir()
	first := testPNG(t, 40, 40, 5)
	b := strings.Replace(tiny(`"plan":"resident"`), "wan-tiny", "i2v", 1)
	b = strings.TrimSuffix(b, "}") + `,"input_reference":"` + base64.StdEncoding.EncodeToString(first) + `"}`
	h := start(t, Config{Models: []string{dir}, DataDir: data, NoWorker: true})
	id := h.submit(b)
	h.close()
	tap := newVideoTap()
	h = start(t, Config{Models: []string{dir}, DataDir: data, faults: &faults{onVideo: tap.put}})
	v := h.wait(id, 2*time.Minute, terminal)
	if v.Status != queue.StatusCompleted {
		t.Fatalf("after the restart: %s %+v", v.Status, v.Error)
	}
	img, err := imageproc.Decode(first)
	if err != nil {
		t.Fatal(err)
	}
	ref := referenceVideoOf(t, filepath.Join(dir, "i2v"), 1, func(_ *wan.Pipeline, r *wan.Request) { r.Image = img })
	if !slices.Equal(tap.get(t, id), ref) {
		t.Error("the re-run video differs from the pipeline's with the stored image")
	}
	if code, _, _ := h.do("DELETE", "/v1/videos/"+id, ""); code != 200 {
		t.Fatalf("delete: %d", code)
	}
	if _, err := h.s.q.GetInput(t.Context(), id, inputImage); err == nil {
		t.Error("a deleted job's image is still stored")
	}
}

// pngClaiming is a 1x1 PNG whose header claims w×h pixels.
func pngClaiming(t *testing.T, w, h uint32) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewGray(image.Rect(0, 0, 1, 1))); err != nil {
		t.Fatal(err)
	}
	out := b.Bytes()
	// After the 8-byte signature: IHDR's length, its type, width, height,
	// five more bytes, then the CRC of type and data.
	binary.BigEndian.PutUint32(out[16:], w)
	binary.BigEndian.PutUint32(out[20:], h)
	binary.BigEndian.PutUint32(out[29:], crc32.ChecksumIEEE(out[12:29]))
	return out
}

// TestMultipartForm: a multipart form as OpenAI's SDKs send it (every
// field a form value, seconds as the string "0.3125", the image a file)
// runs the same job as the JSON body; a bad form is a 400.
func TestMultipartForm(t *testing.T) {
	dir := imageModels(t)
	tap := newVideoTap()
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, faults: &faults{onVideo: tap.put}})
	first := testPNG(t, 45, 37, 0)
	jsonBody := strings.Replace(tiny(`"plan":"resident"`), "wan-tiny", "i2v", 1)
	jsonBody = strings.TrimSuffix(jsonBody, "}") + `,"input_reference":"` + base64.StdEncoding.EncodeToString(first) + `"}`
	byJSON := h.wait(h.submit(jsonBody), 2*time.Minute, terminal)

	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, kv := range [][2]string{{"model", "i2v"}, {"prompt", "a red fox"}, {"size", "32x32"}, {"seconds", "0.3125"},
		{"fps", "16"}, {"num_inference_steps", "2"}, {"guidance_scale", "1"}, {"seed", "7"}, {"plan", "resident"}, {"outputs", "report"}} {
		mw.WriteField(kv[0], kv[1])
	}
	fw, err := mw.CreateFormFile("input_reference", "first.png")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(first)
	mw.Close()
	code, _, data := h.do("POST", "/v1/videos", b.String(), "Content-Type", mw.FormDataContentType())
	if code != 202 {
		t.Fatalf("multipart: %d %s", code, data)
	}
	var v videoJSON
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	byForm := h.wait(v.ID, 2*time.Minute, terminal)
	if byJSON.Status != queue.StatusCompleted || byForm.Status != queue.StatusCompleted {
		t.Fatalf("JSON job %s, form job %s %+v", byJSON.Status, byForm.Status, byForm.Error)
	}
	if !slices.Equal(tap.get(t, byJSON.ID), tap.get(t, byForm.ID)) {
		t.Error("the form's video differs from the JSON body's")
	}
	if code, _, _ := h.do("GET", "/v1/videos/"+byForm.ID+"/content?variant=report", ""); code != 200 {
		t.Errorf("the form's outputs field was lost: report %d", code)
	}
	for _, c := range []struct{ name, ct, body, param string }{
		{"no boundary", "multipart/form-data", "x", "body"},
		{"truncated", mw.FormDataContentType(), b.String()[:b.Len()/2], "body"},
		{"seconds not a number", "multipart/form-data; boundary=B", "--B\r\nContent-Disposition: form-data; name=\"seconds\"\r\n\r\nfour\r\n--B--\r\n", "seconds"},
	} {
		code, _, data := h.do("POST", "/v1/videos", c.body, "Content-Type", c.ct)
		var e apiError
		json.Unmarshal(data, &e)
		if code != 400 || e.Error.Param == nil || *e.Error.Param != c.param {
			t.Errorf("%s: %d %s; want 400 naming %s", c.name, code, data, c.param)
		}
	}
}

// TestTI2VImageMode: a TI2V folder (WanPipeline with expand_timesteps)
// runs text to video, and image to video when a job gives an image: each
// mode gets a runtime of its own (the image mode registers the VAE's
// encoder), and every video is the pipeline's in that mode, bit for bit.
// A size TI2V's patches do not divide runs rounded down, as diffusers
// runs it. A last frame is refused: TI2V conditions on its first.
func TestTI2VImageMode(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "pipeline", "wan", "testdata", "wan22_ti2v_t2v_pipeline", "pipeline")
	if err := os.CopyFS(filepath.Join(dir, "ti2v"), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	tap := newVideoTap()
	h := start(t, Config{Models: []string{dir}, KeepAlive: -1, faults: &faults{onVideo: tap.put}})
	first := testPNG(t, 45, 37, 0)
	img, err := imageproc.Decode(first)
	if err != nil {
		t.Fatal(err)
	}
	t2v := strings.Replace(tiny(`"plan":"resident"`), "wan-tiny", "ti2v", 1)
	i2v := strings.TrimSuffix(t2v, "}") + `,"input_reference":"` + base64.StdEncoding.EncodeToString(first) + `"}`
	refs := map[bool][]float32{
		false: referenceVideoOf(t, filepath.Join(dir, "ti2v"), 1, func(*wan.Pipeline, *wan.Request) {}),
		true: referenceVideoOf(t, filepath.Join(dir, "ti2v"), 1, func(p *wan.Pipeline, r *wan.Request) {
			if err := p.SetImageMode(true); err != nil {
				t.Fatal(err)
			}
			r.Image = img
		}),
	}
	if slices.Equal(refs[false], refs[true]) {
		t.Fatal("the image did not change the reference video")
	}
	for i, withImage := range []bool{false, true, false, true} {
		body := t2v
		if withImage {
			body = i2v
		}
		v := h.wait(h.submit(body), 2*time.Minute, terminal)
		if v.Status != queue.StatusCompleted {
			t.Fatalf("job %d (image %v): %s %+v", i, withImage, v.Status, v.Error)
		}
		if !slices.Equal(tap.get(t, v.ID), refs[withImage]) {
			t.Errorf("job %d (image %v): the video differs from the pipeline's in that mode", i, withImage)
		}
	}
	// 48x32 is a multiple of 16 but not of TI2V's 32: run at 32x32, as
	// diffusers corrects it, and shown so.
	v := h.wait(h.submit(strings.Replace(t2v, `"size":"32x32"`, `"size":"48x32"`, 1)), 2*time.Minute, terminal)
	if v.Status != queue.StatusCompleted || v.Size != "32x32" || !slices.Equal(tap.get(t, v.ID), refs[false]) {
		t.Errorf("48x32 on TI2V: %s %+v, size %s; want 32x32 completed as the 32x32 video", v.Status, v.Error, v.Size)
	}
	last := strings.TrimSuffix(i2v, "}") + `,"last_image":"` + base64.StdEncoding.EncodeToString(first) + `"}`
	code, _, data := h.do("POST", "/v1/videos", last)
	var e apiError
	json.Unmarshal(data, &e)
	if code != 400 || e.Error.Param == nil || *e.Error.Param != "last_image" {
		t.Errorf("a last frame on TI2V: %d %s; want 400 naming last_image", code, data)
	}
}

// TestImageDiskFull: with no room for a job's images the submission is a
// 507 disk_full, nothing is queued or left stored, and /readyz is false
// until space returns.
func TestImageDiskFull(t *testing.T) {
	dir := imageModels(t)
	h := start(t, Config{Models: []string{dir}, NoWorker: true, faults: &faults{diskFull: true}})
	b := strings.Replace(tiny(""), "wan-tiny", "i2v", 1)
	b = strings.TrimSuffix(b, "}") + `,"input_reference":"` + base64.StdEncoding.EncodeToString(testPNG(t, 16, 16, 1)) + `"}`
	code, _, data := h.do("POST", "/v1/videos", b)
	if code != 507 || errorCode(t, data) != "disk_full" {
		t.Fatalf("%d %s; want 507 disk_full", code, data)
	}
	if queued, running, _ := h.s.q.Depth(t.Context()); queued+running != 0 {
		t.Errorf("%d jobs queued after a refused submission", queued+running)
	}
	if ents, _ := os.ReadDir(filepath.Join(h.dir, "inputs")); len(ents) != 0 {
		t.Errorf("inputs left behind: %v", ents)
	}
	if code, _, _ := h.do("GET", "/readyz", ""); code != 503 {
		t.Errorf("readyz %d while the disk is full", code)
	}
}
