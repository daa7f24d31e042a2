package dataset

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"ferry/media"
)

// Source is one sample of a data folder: a clip or image and its caption.
type Source struct {
	Name    string // the file name without extension: the sample's name
	Clip    string // path of the clip or image
	Caption string // the caption, white space at the ends trimmed
	ModTime time.Time
	Bytes   int64
}

// captionExt is the caption files' extension.
const captionExt = ".txt"

// maxCaptionBytes bounds a caption file (UMT5 reads 512 tokens at most).
const maxCaptionBytes = 1 << 20

// Scan pairs the clips of a data folder (not its subfolders) with their
// captions: NAME.{mp4,avi,gif,png,jpg,jpeg,...} with NAME.txt. Hidden
// files and other extensions are ignored. A caption without a clip, a clip
// without a caption, two clips of one name and an empty caption are
// errors naming the file (the first one found, with a count of the rest).
// Sources come sorted by name.
func Scan(dir string) ([]Source, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("data folder: %w", err)
	}
	clips := map[string][]string{}
	captions := map[string]string{}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || e.IsDir() {
			continue
		}
		ext := filepath.Ext(n)
		stem := strings.TrimSuffix(n, ext)
		switch {
		case strings.EqualFold(ext, captionExt):
			captions[stem] = filepath.Join(dir, n)
		case media.CanDecode(n):
			clips[stem] = append(clips[stem], filepath.Join(dir, n))
		}
	}
	var problems []string
	var out []Source
	for stem, paths := range clips {
		if len(paths) > 1 {
			sort.Strings(paths)
			problems = append(problems, fmt.Sprintf("%s share the name %q; rename all but one (one caption %s%s is for one clip)", strings.Join(paths, " and "), stem, stem, captionExt))
			continue
		}
		if err := checkName("sample", stem); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v; rename the clip and its caption", paths[0], err))
			continue
		}
		cap, ok := captions[stem]
		if !ok {
			problems = append(problems, fmt.Sprintf("%s has no caption; write it in %s", paths[0], filepath.Join(dir, stem+captionExt)))
			continue
		}
		s, err := source(stem, paths[0], cap)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		out = append(out, s)
	}
	for stem, cap := range captions {
		if _, ok := clips[stem]; !ok {
			problems = append(problems, fmt.Sprintf("%s is a caption without a clip; put %s.mp4 (or .avi, .gif, .png, .jpg) beside it or remove it", cap, stem))
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		msg := problems[0]
		if len(problems) > 1 {
			msg += fmt.Sprintf(" (and %d more problems in %s)", len(problems)-1, dir)
		}
		return nil, fmt.Errorf("%s", msg)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("data folder %s has no clips with captions (NAME.mp4, .avi, .gif, .png or .jpg beside NAME.txt)", dir)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// source reads a pair's caption and the clip's size and time.
func source(name, clip, caption string) (Source, error) {
	st, err := os.Stat(clip)
	if err != nil {
		return Source{}, err
	}
	if !st.Mode().IsRegular() {
		return Source{}, fmt.Errorf("%s is not a regular file", clip)
	}
	cst, err := os.Stat(caption)
	if err != nil {
		return Source{}, err
	}
	if cst.Size() > maxCaptionBytes {
		return Source{}, fmt.Errorf("%s is %d bytes, too long for a caption", caption, cst.Size())
	}
	data, err := os.ReadFile(caption)
	if err != nil {
		return Source{}, err
	}
	text := strings.TrimSpace(string(data))
	if text == "" {
		return Source{}, fmt.Errorf("%s is empty; write the clip's caption in it", caption)
	}
	if !utf8.ValidString(text) {
		return Source{}, fmt.Errorf("%s is not UTF-8 text", caption)
	}
	return Source{Name: name, Clip: clip, Caption: text, ModTime: st.ModTime(), Bytes: st.Size()}, nil
}
